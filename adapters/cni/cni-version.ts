// CNI spec versions this adapter speaks. 0.3.x costs nothing extra: its result has the same shape as
// 0.4.0's, and it only lacks CHECK. Anything older has no rich result and is refused (code 1).

export const SUPPORTED_CNI_VERSIONS: readonly string[] = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

/** The version used for our own output when the caller did not name one we support. */
export const LATEST_CNI_VERSION = '1.1.0';

/**
 * What libcni assumes when a config has no cniVersion at all. Kept so that the refusal names the
 * same version a Go plugin would.
 */
export const IMPLIED_CNI_VERSION = '0.1.0';

// Exact string match, like libcni's version reconciler: "1.0" is not "1.0.0".
export function isSupportedCniVersion(version: string): boolean {
  return SUPPORTED_CNI_VERSIONS.includes(version);
}

/** Compare two dotted versions numerically; non-numeric parts count as 0. */
export function compareCniVersions(a: string, b: string): number {
  const pa = a.split('.').map((p) => Number.parseInt(p, 10) || 0);
  const pb = b.split('.').map((p) => Number.parseInt(p, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export function cniVersionAtLeast(version: string, minimum: string): boolean {
  return compareCniVersions(version, minimum) >= 0;
}

/** 0.x results carry a "version" per IP; 1.0.0 dropped it. */
export function resultHasIpVersion(version: string): boolean {
  return !cniVersionAtLeast(version, '1.0.0');
}

/** 1.1.0 added mtu/socketPath/pciID to interfaces and mtu/advmss/priority/table/scope to routes. */
export function resultHasExtendedFields(version: string): boolean {
  return cniVersionAtLeast(version, '1.1.0');
}
