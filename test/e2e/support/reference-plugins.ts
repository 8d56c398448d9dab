import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import * as path from 'node:path';

// Debian's reference CNI plugins (package containernetworking-plugins), used as the known-good baseline
// the harness is proven with and workloadnet is measured against.

export const REFERENCE_PLUGIN_DIR = '/usr/lib/cni';

/**
 * Copies reference plugins into a CNI bin folder. containerd 1.6 always runs `loopback` from its bin
 * folder for the pod's lo, so every bin folder it is given needs that one, whatever the network plugin.
 */
export async function installReferencePlugins(
  binDir: string,
  plugins: readonly string[] = ['bridge', 'host-local', 'loopback'],
): Promise<void> {
  await mkdir(binDir, { recursive: true });
  for (const plugin of plugins) {
    await copyFile(path.join(REFERENCE_PLUGIN_DIR, plugin), path.join(binDir, plugin));
  }
}

export interface ReferenceNetworkOptions {
  /** Network name (also host-local's allocation namespace). */
  name: string;
  plugin: 'bridge' | 'ptp';
  /** IPv4 subnet pods get addresses from, e.g. 10.252.0.0/24. */
  subnet: string;
  /** host-local's state folder: keep it test-owned, the default is the machine-wide /var/lib/cni/networks. */
  dataDir: string;
  /** Bridge name (bridge plugin only; at most 15 bytes, unique per test). */
  bridge?: string;
  cniVersion?: string;
}

/** The conflist entry (a single plugin with host-local IPAM), as a runtime passes it on stdin. */
export function referencePluginConfig(opts: ReferenceNetworkOptions): Record<string, unknown> {
  const ipam = {
    type: 'host-local',
    subnet: opts.subnet,
    dataDir: opts.dataDir,
    routes: [{ dst: '0.0.0.0/0' }],
  };
  if (opts.plugin === 'bridge') {
    // isGateway gives the bridge the subnet's first address, so pods on it reach each other and the
    // node namespace. No ipMasq: that would need iptables rules, and there is no outside to reach.
    return { type: 'bridge', bridge: opts.bridge ?? 'cni0', isGateway: true, ipMasq: false, ipam };
  }
  return { type: 'ptp', ipMasq: false, ipam };
}

export function referenceConflist(opts: ReferenceNetworkOptions): Record<string, unknown> {
  return { cniVersion: opts.cniVersion ?? '1.0.0', name: opts.name, plugins: [referencePluginConfig(opts)] };
}

/** Writes the conflist where containerd looks for it and returns its path. */
export async function writeConflist(confDir: string, conflist: Record<string, unknown>): Promise<string> {
  await mkdir(confDir, { recursive: true });
  const name = typeof conflist['name'] === 'string' ? conflist['name'] : 'network';
  const file = path.join(confDir, `10-${name}.conflist`);
  await writeFile(file, JSON.stringify(conflist, null, 2));
  return file;
}

/** A CNI setup in `work` as a runtime is given one: its bin and conf folders. */
export interface CniDirs {
  cniBinDir: string;
  cniConfDir: string;
}

/**
 * The reference bridge network with host-local IPAM, set up in `work`: the plugins in work/bin, the
 * conflist in work/conf, host-local's leases in work/ipam.
 */
export async function installReferenceBridge(
  work: string,
  opts: { name: string; bridge: string; subnet: string },
): Promise<CniDirs> {
  const dirs = { cniBinDir: path.join(work, 'bin'), cniConfDir: path.join(work, 'conf') };
  await installReferencePlugins(dirs.cniBinDir);
  await writeConflist(
    dirs.cniConfDir,
    referenceConflist({ ...opts, plugin: 'bridge', dataDir: path.join(work, 'ipam') }),
  );
  return dirs;
}
