import type { Command } from 'commander';
import type {
  FabricEndpoint,
  FabricHostPort,
  FabricPeer,
  FabricStatus,
} from '../proto/gen/workloadnet/v1/workload';
import { EXIT, clientCommand, withClient } from './client-commands';
import { age, json, table } from './output';
import { peerCounts } from './peer-counts';

// `workloadnet peers`: the fabric as the daemon sees it (Status.fabric): this node, the peer source,
// and one row per peer with the path that reaches it and what the data-path probes say (reachable,
// degraded, unknown; the round trip); below the table, per peer, its DPUs' tunnel
// endpoints with their slices, and how each DPU of this node sees it. Exit code 3 when the fabric is on
// and not ready, like `status` when the node is not ready.

interface PeersOpts {
  socket: string;
  timeout: string;
  json?: boolean;
}

export function registerPeersCommand(program: Command): void {
  clientCommand(program, 'peers', 'list the other nodes of the fabric: underlay, path in use, prefixes')
    .option('--json', 'print JSON (the Status API’s fabric)')
    .addHelpText(
      'after',
      '\nExit code 3 when the fabric is on and not ready.\nExamples:\n  workloadnet peers\n  workloadnet peers --json | jq -r \'.peers[] | select(.path == "unreachable") | .node\'',
    )
    .action((opts: PeersOpts) =>
      withClient(opts, async (c) => {
        const st = await c.status();
        const fabric = st.fabric;
        process.stdout.write(opts.json ? json(fabric ?? null) : formatPeers(fabric));
        return !fabric || fabric.mode === 'off' || fabric.ready ? EXIT.ok : EXIT.notReady;
      }),
    );
}

export function formatPeers(f: FabricStatus | undefined, now = Date.now()): string {
  if (!f || f.mode === 'off') return 'the fabric is off (daemon --fabric, config fabric.mode)\n';
  const lines = [`fabric:      ${f.mode}, ${f.ready ? 'ready' : 'not ready'}, ${peerCounts(f)}`];
  for (const r of f.reasons) lines.push(`  reason:    ${r}`);
  for (const w of f.warnings) lines.push(`  warning:   ${w}`);
  if (f.node)
    lines.push(
      `this node:   ${f.node} ${f.underlay.join(',') || '-'} (uplink ${f.uplink || '-'}, mtu ${f.mtu}, pod mtu ${f.podMtu})`,
    );
  for (const e of f.endpoints) lines.push(`  endpoint:  ${endpoint(e)}`);
  if (f.hostPort) lines.push(`host port:   ${formatHostPort(f.hostPort)}`);
  if (f.source) {
    const s = f.source;
    lines.push(
      `source:      ${s.kind} (${s.ready ? 'synced' : 'not synced'}, ${s.connected ? 'connected' : 'not connected'})`,
    );
    for (const r of s.reasons) lines.push(`  reason:    ${r}`);
    for (const r of s.rejected) lines.push(`  rejected:  ${r}`);
  }
  lines.push(
    `programmed:  ${f.routes} routes, ${f.neighbours} neighbours, ${f.fdb} fdb entries; ${f.repairs} repairs`,
  );
  if (f.filteredPackets !== undefined)
    lines.push(`filtered:    ${f.filteredPackets} packets dropped by the source filter`);
  let out = lines.join('\n') + '\n';
  if (f.peers.length === 0) return out + 'no peers\n';
  out +=
    '\n' +
    table(
      ['NODE', 'UNDERLAY', 'PATH', 'PREFIXES', 'PROBE', 'RTT', 'CHANGED', 'REASON'],
      f.peers.map((p) => [
        p.node,
        p.underlay.join(',') || '-',
        p.withdrawnAt ? `${p.path} (withdrawing)` : p.path,
        p.prefixes.join(',') || '-',
        probeState(p, now),
        p.probe?.answered ? `${ms(p.probe.rttMs)} (median ${ms(p.probe.medianRttMs)})` : '-',
        p.lastChange ? `${age(p.lastChange, now)} ago` : '-',
        p.reason || '-',
      ]),
    );
  const details = f.peers.flatMap(peerDetails);
  return details.length ? `${out}\n${details.join('\n')}\n` : out;
}

/** The probes' word: reachable, degraded (with the probes lost and since when), or unknown; - when off. */
function probeState(p: FabricPeer, now: number): string {
  const probe = p.probe;
  if (!probe) return '-';
  if (probe.state === 'degraded')
    return `degraded (${probe.lost} lost${probe.since ? `, ${age(probe.since, now)}` : ''})`;
  return probe.state;
}

function ms(v: number): string {
  return v < 10 ? `${v.toFixed(2)} ms` : `${Math.round(v)} ms`;
}

/** A peer's DPU endpoints and how this node's DPUs see it, one line each. */
function peerDetails(p: FabricPeer): string[] {
  const out = p.endpoints.map((e) => `${p.node}: endpoint ${endpoint(e)}`);
  for (const s of p.seenBy) {
    const state = [s.reachable ? 'reachable' : 'unreachable', s.offloaded ? 'offloaded' : 'not offloaded'];
    out.push(
      `${p.node}: seen by ${s.endpoint}: ${state.join(', ')}, tx ${s.txPackets} rx ${s.rxPackets} packets${s.lastError ? `; last error: ${s.lastError}` : ''}`,
    );
  }
  return out;
}

/**
 * The host's path into the overlay, one line: "wn-host0 10.244.1.5 on DPU d0 (routes 10.244.0.0/16)",
 * or why there is none (`workloadnet peers` and `workloadnet dpus`).
 */
export function formatHostPort(h: FabricHostPort): string {
  if (h.state !== 'attached') return `${h.state}${h.reason ? `: ${h.reason}` : ''}`;
  const at = `${h.interface} ${h.addresses.join(',') || '-'} on DPU ${h.dpu || '-'}`;
  return `${at} (network ${h.network}, routes ${routesText(h)})${h.reason ? `; ${h.reason}` : ''}`;
}

/** Shown routes of the host port. */
const SHOWN_ROUTES = 4;

/**
 * Its routes on one line: without the cluster's ranges (fabric.clusterCidrs, etcd.clusterCidrs) it
 * routes one per peer, thousands of them; the first few and how many (`peers --json` lists them).
 */
function routesText(h: FabricHostPort): string {
  // A daemon from before route_count gives the list only.
  const count = Math.max(h.routeCount, h.routes.length);
  if (count === 0) return '-';
  if (h.routes.length === 0) return `${count} ranges`;
  const shown = h.routes.slice(0, SHOWN_ROUTES).join(',');
  return count > SHOWN_ROUTES ? `${shown},… ${count} in all` : shown;
}

/** A DPU's VTEP and its slices. */
function endpoint(e: FabricEndpoint): string {
  return `${e.id} ${e.underlay}${e.vtep ? ` (${e.vtep.mac}, vni ${e.vtep.vni})` : ''}, mtu ${e.mtu}: ${e.prefixes.join(',') || 'no prefixes'}`;
}
