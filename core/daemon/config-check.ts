import { clusterRanges, validateFabric } from '../fabric-config';
import { invalidArgument } from '../errors';
import { validateNetworks } from '../ipam/networks-check';
import { LOG_LEVELS, validMtu, type ConfigOverrides, type DaemonConfig } from '../config';

// The configuration the daemon starts with: the layers (defaults, the file, the flags) merged, and
// the whole checked before anything starts, so a mistake is refused in words and nothing runs with
// it. Its own file because the check is the daemon's gate at start, apart from the configuration's
// shape and defaults (core/config.ts) that every room reads.

export function mergeConfig(base: DaemonConfig, ...layers: ConfigOverrides[]): DaemonConfig {
  let out: DaemonConfig = structuredClone(base);
  for (const layer of layers) {
    const { linux, dpu, etcd, fabric, ...top } = layer;
    const defined = Object.fromEntries(Object.entries(top).filter(([, v]) => v !== undefined));
    out = {
      ...out,
      ...defined,
      linux: { ...out.linux, ...stripUndefined(linux) },
      dpu: { ...out.dpu, ...stripUndefined(dpu) },
      etcd: { ...out.etcd, ...stripUndefined(etcd) },
      fabric: { ...out.fabric, ...stripUndefined(fabric) },
    };
  }
  return validateConfig(out);
}

function stripUndefined<T extends object>(o: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export function validateConfig(c: DaemonConfig): DaemonConfig {
  const fail = (msg: string): never => {
    throw invalidArgument(`invalid configuration: ${msg}`);
  };
  for (const key of ['socket', 'cniSocket', 'stateDir'] as const) {
    if (typeof c[key] !== 'string' || !c[key].startsWith('/')) fail(`${key} must be an absolute path`);
  }
  if (c.backend !== 'linux' && c.backend !== 'dpu')
    fail(`backend must be "linux" or "dpu", not "${String(c.backend)}"`);
  if (!Array.isArray(c.podCidrs) || c.podCidrs.some((p) => typeof p !== 'string')) {
    fail('podCidrs must be a list of CIDR strings');
  }
  if (!validMtu(c.mtu)) fail(`mtu must be 0 (auto) or an integer in 68..65535, not ${String(c.mtu)}`);
  if (typeof c.masquerade !== 'boolean') fail('masquerade must be true or false');
  if (!(LOG_LEVELS as readonly unknown[]).includes(c.logLevel))
    fail(`logLevel must be one of ${LOG_LEVELS.join(', ')}, not ${JSON.stringify(c.logLevel)}`);
  if (!Number.isInteger(c.maxInFlight) || c.maxInFlight < 1) fail('maxInFlight must be a positive integer');
  for (const key of [
    'apiMaxConnections',
    'apiIdleTimeoutMs',
    'cniMaxConnections',
    'cniHeaderTimeoutMs',
    'cniBodyTimeoutMs',
    'cniIdleTimeoutMs',
    'shutdownTimeoutMs',
  ] as const) {
    if (!Number.isInteger(c[key]) || c[key] < 1) fail(`${key} must be a positive integer`);
  }
  if (!Number.isInteger(c.sweepIntervalMs) || c.sweepIntervalMs < 0)
    fail('sweepIntervalMs must be 0 (off) or a positive integer (ms)');
  if (c.metricsListen && !/^[^\s]+:\d{1,5}$/.test(c.metricsListen)) fail('metricsListen must be HOST:PORT');
  if (
    !Number.isInteger(c.eventLoopResolutionMs) ||
    c.eventLoopResolutionMs < 1 ||
    c.eventLoopResolutionMs > 10_000
  )
    fail('eventLoopResolutionMs must be an integer in 1..10000 (ms)');
  if (!Number.isInteger(c.linux.linkGroup) || c.linux.linkGroup < 1 || c.linux.linkGroup > 0xffffffff) {
    fail('linux.linkGroup must be an integer in 1..4294967295');
  }
  if (
    !Number.isInteger(c.linux.detachGroup) ||
    c.linux.detachGroup < 1 ||
    c.linux.detachGroup > 0xffffffff ||
    c.linux.detachGroup === c.linux.linkGroup
  ) {
    fail('linux.detachGroup must be an integer in 1..4294967295 other than linux.linkGroup');
  }
  if (typeof c.linux.ipv6LinkLocal !== 'boolean') fail('linux.ipv6LinkLocal must be true or false');
  if (c.dpu.agentListen && !(c.dpu.tlsCert && c.dpu.tlsKey && c.dpu.tlsCa)) {
    fail('dpu.agentListen needs dpu.tlsCert, dpu.tlsKey and dpu.tlsCa: agents over TCP must use mutual TLS');
  }
  if (!Number.isInteger(c.dpu.ackTimeoutMs) || c.dpu.ackTimeoutMs < 1)
    fail('dpu.ackTimeoutMs must be a positive integer');
  if (typeof c.dpu.hostPort !== 'boolean')
    fail(`dpu.hostPort must be true or false, not ${JSON.stringify(c.dpu.hostPort)}`);
  if (!Number.isInteger(c.dpu.goneGraceSeconds) || c.dpu.goneGraceSeconds < 1)
    fail(
      `dpu.goneGraceSeconds must be a positive whole number of seconds (default 600), not ${JSON.stringify(c.dpu.goneGraceSeconds)}`,
    );
  validatePoolSource(c, fail);
  validatePolicy(c, fail);
  validateFabric(c, fail); // before the networks, which are checked against its cluster ranges
  validateNetworks(c, fail);
  return c;
}

function validatePolicy(c: DaemonConfig, fail: (msg: string) => never): void {
  if (!['auto', 'on', 'off'].includes(c.networkPolicy))
    fail(`networkPolicy must be "auto", "on" or "off", not ${JSON.stringify(c.networkPolicy)}`);
  if (c.networkPolicy === 'on' && c.poolSource !== 'kubernetes')
    fail(
      'networkPolicy "on" needs the Kubernetes API, where the policies are: poolSource "kubernetes" (--pool-source kubernetes)',
    );
  if (
    !Number.isInteger(c.policyAdmitTimeoutMs) ||
    c.policyAdmitTimeoutMs < 100 ||
    c.policyAdmitTimeoutMs > 300_000
  )
    fail(
      `policyAdmitTimeoutMs must be a whole number of ms in 100..300000, not ${JSON.stringify(c.policyAdmitTimeoutMs)}`,
    );
  if (typeof c.dpu.allowUnenforcedPolicy !== 'boolean')
    fail('dpu.allowUnenforcedPolicy must be true or false');
}

function validatePoolSource(c: DaemonConfig, fail: (msg: string) => never): void {
  if (!['static', 'kubernetes', 'etcd'].includes(c.poolSource))
    fail(`poolSource must be "static", "kubernetes" or "etcd", not "${String(c.poolSource)}"`);
  if (
    typeof c.nodeName !== 'string' ||
    (c.nodeName !== '' && !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(c.nodeName))
  )
    fail(
      `nodeName "${String(c.nodeName)}" is not a valid node name (lowercase letters, digits, "-" and ".")`,
    );
  const e = c.etcd;
  const list = (v: unknown): boolean => Array.isArray(v) && v.every((x) => typeof x === 'string');
  if (!list(e.endpoints)) fail('etcd.endpoints must be a list of URLs');
  if (!list(e.clusterCidrs)) fail('etcd.clusterCidrs must be a list of CIDR strings');
  if (!Number.isInteger(e.blockSize) || e.blockSize < 20 || e.blockSize > 30)
    fail(`etcd.blockSize must be an IPv4 prefix length in 20..30, not ${e.blockSize}`);
  if (typeof e.prefix !== 'string' || !e.prefix.startsWith('/') || e.prefix.endsWith('/'))
    fail('etcd.prefix must start with "/" and not end with one (e.g. /workloadnet)');
  if (!Number.isInteger(e.emptyBlockGraceSeconds) || e.emptyBlockGraceSeconds < 0)
    fail('etcd.emptyBlockGraceSeconds must be a non-negative integer');
  if ((e.cert === '') !== (e.key === '')) fail('etcd.cert and etcd.key go together');
  if (c.poolSource !== 'etcd') return;
  if (e.endpoints.length === 0) fail('poolSource "etcd" needs etcd.endpoints (--etcd-endpoints)');
  for (const url of e.endpoints)
    if (!/^https?:\/\/[^\s/]+$/.test(url)) fail(`etcd endpoint "${url}" must look like http(s)://HOST:PORT`);
  if (e.endpoints.some((u) => u.startsWith('https:')) && !e.ca) fail('https etcd endpoints need etcd.ca');
  if (e.clusterCidrs.length === 0) fail('poolSource "etcd" needs etcd.clusterCidrs (--cluster-cidr)');
  for (const cidr of clusterRanges('etcd.clusterCidrs', e.clusterCidrs, fail)) {
    const block = cidr.family === 4 ? e.blockSize : 96 + e.blockSize;
    if (cidr.prefixLength > block)
      fail(
        `cluster CIDR ${cidr.text} is smaller than one /${block} block; use a larger range or etcd.blockSize`,
      );
  }
}
