import { cidrsOverlap } from '../address-space';
import { parseCidr, type Cidr } from '../../lib/cidr';
import { closestName } from '../../lib/closest-name';
import { DEFAULT_NETWORK, validMtu, type DaemonConfig } from '../config';

// The check of the configured networks: their keys and names, backends, MTUs and routes, and that no
// pod range is in two networks (nor in the default network's cluster ranges). Its own file because the
// networks are a concept of their own (docs/networks.md): their rules change with them, not with the
// daemon's other options.

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const NETWORK_KEYS = new Set(['name', 'backend', 'podCidrs', 'mtu', 'defaultRoute', 'routes', 'masquerade']);

export function validateNetworks(c: DaemonConfig, fail: (msg: string) => never): void {
  if (!Array.isArray(c.networks)) fail('networks must be a list of objects');
  const names = new Set<string>();
  // Every network's pools, so that no address is in two networks: the configured podCidrs, and the
  // default network's cluster ranges (etcd's or fabric.clusterCidrs; a Node's ranges are known only
  // at run time: the address space refuses those, see core/address-space.ts).
  const ranges: Array<{ network: string; cidr: Cidr; from: string }> = [];
  const cluster = c.poolSource === 'etcd' ? 'etcd.clusterCidrs' : 'fabric.clusterCidrs';
  if (c.networks.length > 0)
    for (const text of c.poolSource === 'etcd' ? c.etcd.clusterCidrs : c.fabric.clusterCidrs)
      ranges.push({ network: DEFAULT_NETWORK, cidr: parseCidr(text), from: cluster });
  if (
    c.networks.length > 0 &&
    c.poolSource !== 'static' &&
    !c.networks.some((n) => (n as { name?: unknown } | null)?.name === DEFAULT_NETWORK)
  )
    fail(
      `poolSource "${c.poolSource}" supplies the "default" network's pools; networks has none named "default"`,
    );
  for (const [i, n] of c.networks.entries()) {
    if (!n || typeof n !== 'object' || Array.isArray(n)) fail(`networks[${i}] must be an object`);
    for (const k of Object.keys(n))
      if (!NETWORK_KEYS.has(k)) {
        const guess = closestName(k, NETWORK_KEYS);
        fail(
          `networks[${i}]: unknown key "${k}"; ` +
            (guess ? `did you mean "${guess}"?` : `a network's keys are ${[...NETWORK_KEYS].join(', ')}`),
        );
      }
    const where = `network "${String(n.name)}"`;
    if (typeof n.name !== 'string' || !NETWORK_NAME.test(n.name) || n.name.length > 64)
      fail(
        `networks[${i}].name must be 1-64 letters, digits, "_", "." and "-", starting with a letter or digit`,
      );
    if (names.has(n.name)) fail(`two networks are named "${n.name}"`);
    names.add(n.name);
    if (n.backend !== 'linux' && n.backend !== 'dpu')
      fail(`${where}: backend must be "linux" or "dpu", not "${String(n.backend)}"`);
    if (n.mtu !== undefined && !validMtu(n.mtu))
      fail(`${where}: mtu must be 0 (auto) or an integer in 68..65535, not ${String(n.mtu)}`);
    for (const key of ['defaultRoute', 'masquerade'] as const)
      if (n[key] !== undefined && typeof n[key] !== 'boolean') fail(`${where}: ${key} must be true or false`);
    for (const key of ['podCidrs', 'routes'] as const) {
      const v = n[key];
      if (v === undefined) continue;
      if (!Array.isArray(v) || v.some((x) => typeof x !== 'string'))
        fail(`${where}: ${key} must be a list of CIDR strings`);
      for (const text of v) {
        let cidr;
        try {
          cidr = parseCidr(text);
        } catch (err) {
          return fail(`${where}: ${key}: ${(err as Error).message}`);
        }
        if (key === 'podCidrs') {
          // The default network's own podCidrs may repeat the cluster range its source supplies.
          const clash = ranges.find(
            (r) => cidrsOverlap(r.cidr, cidr) && !(r.network === n.name && r.from !== 'podCidrs'),
          );
          if (clash)
            fail(
              `${where}: pod CIDR ${text} overlaps ${clash.cidr.text} of network "${clash.network}"` +
                (clash.from === 'podCidrs' ? '' : ` (its ${clash.from})`),
            );
          ranges.push({ network: n.name, cidr, from: 'podCidrs' });
        }
      }
    }
    const ownPools = n.name === DEFAULT_NETWORK && c.poolSource !== 'static';
    if (!ownPools && (n.podCidrs ?? []).length === 0)
      fail(`${where} has no podCidrs (only the "default" network takes its pools from poolSource)`);
  }
}
