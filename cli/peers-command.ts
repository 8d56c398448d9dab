import type { Command } from 'commander';
import type { FabricStatus } from '../proto/gen/workloadnet/v1/workload';
import { EXIT, clientCommand, withClient } from './client-commands';
import { age, json, table } from './output';

// `workloadnet peers`: the fabric as the daemon sees it (Status.fabric): this node, the peer source,
// and one row per peer with the path that reaches it. Exit code 3 when the fabric is on and not ready,
// like `status` when the node is not ready.

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
        const st = await c.call(c.raw.status, {});
        const fabric = st.fabric;
        process.stdout.write(opts.json ? json(fabric ?? null) : formatPeers(fabric));
        return !fabric || fabric.mode === 'off' || fabric.ready ? EXIT.ok : EXIT.notReady;
      }),
    );
}

export function formatPeers(f: FabricStatus | undefined, now = Date.now()): string {
  if (!f || f.mode === 'off') return 'the fabric is off (daemon --fabric, config fabric.mode)\n';
  const lines = [`fabric:      ${f.mode}, ${f.ready ? 'ready' : 'not ready'}`];
  for (const r of f.reasons) lines.push(`  reason:    ${r}`);
  for (const w of f.warnings) lines.push(`  warning:   ${w}`);
  if (f.node)
    lines.push(
      `this node:   ${f.node} ${f.underlay.join(',') || '-'} (uplink ${f.uplink || '-'}, mtu ${f.mtu}, pod mtu ${f.podMtu})`,
    );
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
  let out = lines.join('\n') + '\n';
  if (f.peers.length === 0) return out + 'no peers\n';
  out +=
    '\n' +
    table(
      ['NODE', 'UNDERLAY', 'PATH', 'PREFIXES', 'CHANGED', 'REASON'],
      f.peers.map((p) => [
        p.node,
        p.underlay.join(',') || '-',
        p.withdrawnAt ? `${p.path} (withdrawing)` : p.path,
        p.prefixes.join(',') || '-',
        p.lastChange ? `${age(p.lastChange, now)} ago` : '-',
        p.reason || '-',
      ]),
    );
  return out;
}
