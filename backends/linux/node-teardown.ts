import {
  AF_INET,
  AF_INET6,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  delLinkRequest,
  delRouteRequest,
  listRoutes,
  NetlinkSocket,
  type Route,
} from '../../lib/rtnetlink';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { EgressMasquerade, EGRESS_TABLE } from './egress-masquerade';
import { nftRunner, type NftRunner } from './fabric/nft-runner';
import { POLICY_MARK, TABLE_REF as POLICY_TABLE_REF } from '../../lib/nftables/policy-ruleset';
import { findFabricDevice } from './fabric/vxlan-device';
import { VxlanSourceFilter } from './fabric/vxlan-source-filter';

// What the daemon leaves in a node's network namespace when it is removed for good: the fabric's
// routes (our protocol in the main table: peers' blocks and the unreachable catch-alls), its VXLAN
// device (the FDB entries, neighbours and tunnel addresses on it go with it), the VXLAN source filter's
// nftables table and the egress masquerade's. A stop leaves all of it on purpose (a restart must not
// cut pods off); this is the uninstall's step, run only with no daemon holding the node.
//
// Only what carries our mark is touched: a device of our name without our alias, a table of our name
// without our comment, another protocol's route to the same prefix stay as they are. Pods' host links
// are not the fabric's: they go with their attachments (detach first).

export interface TeardownOptions {
  /** The namespace the daemon programs (linux.hostNetns); empty or undefined: this process's. */
  hostNetnsPath?: string;
  /** Says what would go, removes nothing. */
  dryRun?: boolean;
  nftCommand?: string;
}

export interface TeardownReport {
  /** What was removed (or would be, with dryRun), in words. */
  removed: string[];
  /** What could not be removed, and why. */
  failed: string[];
}

export async function tearDownNode(opts: TeardownOptions = {}): Promise<TeardownReport> {
  const out: TeardownReport = { removed: [], failed: [] };
  const path = opts.hostNetnsPath;
  const ns = path === undefined || path === '' ? NetnsHandle.own() : await NetnsHandle.open(path);
  let sock: NetlinkSocket | undefined;
  try {
    sock = NetlinkSocket.openIn(ns);
    await removeRoutes(sock, opts.dryRun === true, out);
    const device = await findFabricDevice(sock);
    if (device)
      await step(out, `VXLAN device ${device.name} (ifindex ${device.index})`, opts, () =>
        sock!.request(delLinkRequest({ index: device.index })).then(() => undefined),
      );
  } finally {
    await sock?.close();
    ns.close();
  }
  const nft = nftRunner({ command: opts.nftCommand, netnsPath: path });
  const filter = new VxlanSourceFilter(nft);
  const held = await filter.held().catch((err: Error) => {
    out.failed.push(`the VXLAN source filter's table could not be read: ${err.message}`);
    return undefined;
  });
  if (held) await step(out, held, opts, () => filter.remove());
  const egress = new EgressMasquerade(nft);
  const owner = await egress.owner().catch((err: Error) => {
    out.failed.push(`nftables table inet ${EGRESS_TABLE} could not be read: ${err.message}`);
    return undefined;
  });
  if (owner === 'ours')
    await step(out, `nftables table inet ${EGRESS_TABLE} (the egress masquerade)`, opts, () =>
      egress.remove(),
    );
  else if (owner === 'foreign')
    out.failed.push(
      `nftables table inet ${EGRESS_TABLE} is not workloadnet's (no mark of ours): left as it is`,
    );
  await removePolicyTable(out, opts, nft);
  return out;
}

/** NetworkPolicy's table, when it carries our mark (a table of its name without it is left as it is). */
async function removePolicyTable(out: TeardownReport, opts: TeardownOptions, nft: NftRunner): Promise<void> {
  let listing: string;
  try {
    listing = await nft(`list table ${POLICY_TABLE_REF}\n`, ['-t']);
  } catch (err) {
    if (!/No such file or directory/.test((err as Error).message))
      out.failed.push(`nftables table ${POLICY_TABLE_REF} could not be read: ${(err as Error).message}`);
    return;
  }
  if (!listing.includes(`comment ${JSON.stringify(POLICY_MARK)}`)) {
    out.failed.push(
      `nftables table ${POLICY_TABLE_REF} is not workloadnet's (no mark of ours): left as it is`,
    );
    return;
  }
  await step(out, `nftables table ${POLICY_TABLE_REF} (NetworkPolicy)`, opts, async () => {
    await nft(`delete table ${POLICY_TABLE_REF}\n`);
  });
}

async function removeRoutes(sock: NetlinkSocket, dryRun: boolean, out: TeardownReport): Promise<void> {
  const routes: Route[] = [];
  for (const family of [AF_INET, AF_INET6] as const)
    routes.push(...(await listRoutes(sock, family, { table: RT_TABLE_MAIN, protocol: RTPROT_WORKLOADNET })));
  if (routes.length === 0) return;
  const what = `${routes.length} routes of ours (protocol ${RTPROT_WORKLOADNET}, main table): ${routes
    .slice(0, 5)
    .map((r) => r.destination)
    .join(', ')}${routes.length > 5 ? ', …' : ''}`;
  if (dryRun) {
    out.removed.push(what);
    return;
  }
  const outcomes = await sock.batch(
    routes.map((r) =>
      delRouteRequest({
        destination: r.destination,
        family: r.family,
        priority: r.priority,
        protocol: RTPROT_WORKLOADNET,
        table: RT_TABLE_MAIN,
      }),
    ),
  );
  // A route gone meanwhile (ESRCH) is what was asked for.
  out.removed.push(what);
  for (const o of outcomes)
    if (!o.ok && o.error.code !== 'ESRCH')
      out.failed.push(`a route of ours could not be removed: ${o.error.message}`);
}

async function step(
  out: TeardownReport,
  what: string,
  opts: TeardownOptions,
  run: () => Promise<void>,
): Promise<void> {
  if (opts.dryRun) {
    out.removed.push(what);
    return;
  }
  try {
    await run();
    out.removed.push(what);
  } catch (err) {
    out.failed.push(`${what}: ${(err as Error).message}`);
  }
}
