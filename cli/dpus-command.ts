import type { Command } from 'commander';
import type { DpuStatus, StatusResponse } from '../proto/gen/workloadnet/v1/workload';
import { EXIT, clientCommand, withClient } from './client-commands';
import { json, table } from './output';
import { formatHostPort } from './peers-command';

// `workloadnet dpus`: the node's DPU agents as the daemon sees them (Status.dpus), one row each, with
// the PFs below, and while the fabric is on each DPU's part of it: whether it carries the fabric, its
// VTEP, its fabric objects acknowledged of those desired, its peers reachable of those it holds. Exit
// code 3 when no agent is healthy, like `status` when the node is not ready.

interface DpusOpts {
  socket: string;
  timeout: string;
  json?: boolean;
}

export function registerDpusCommand(program: Command): void {
  clientCommand(program, 'dpus', 'list the DPU agents: connection, protocol, firmware, PFs, VFs, ports')
    .option('--json', 'print JSON (the Status API’s dpus)')
    .addHelpText(
      'after',
      "\nExit code 3 when no DPU agent is healthy (or the daemon runs another backend).\nExamples:\n  workloadnet dpus\n  workloadnet dpus --json | jq -r '.[] | select(.healthy | not) | .id'",
    )
    .action((opts: DpusOpts) =>
      withClient(opts, async (c) => {
        const st = await c.status({ omitFabricPeers: true });
        process.stdout.write(opts.json ? json(st.dpus) : formatDpus(st));
        return st.dpus.some((d) => d.healthy) ? EXIT.ok : EXIT.notReady;
      }),
    );
}

export function formatDpus(st: StatusResponse): string {
  if (st.backend !== 'dpu') return `the daemon runs the ${st.backend} backend, which has no DPU agents\n`;
  if (st.dpus.length === 0) return 'no DPU agent has connected\n';
  const fabricOn = st.dpus.some((d) => d.fabric);
  const rows = st.dpus.map((d) => [
    d.id,
    state(d),
    d.bootId || '-',
    d.protocolVersion ? String(d.protocolVersion) : '-',
    d.firmwareVersion || '-',
    d.pfs.map((pf) => `${pf.name}:${pf.linkState}`).join(',') || '-',
    d.vfsTotal ? `${d.vfsFree}/${d.vfsTotal}` : '-',
    String(d.ports),
    d.connected ? `${(Number(d.lastHeartbeatAgeMs) / 1000).toFixed(1)}s` : '-',
    ...(fabricOn ? fabricColumns(d) : []),
  ]);
  let out = table(
    [
      'DPU',
      'STATE',
      'BOOT',
      'PROTOCOL',
      'FIRMWARE',
      'PFS',
      'VFS FREE',
      'PORTS',
      'HEARTBEAT',
      ...(fabricOn ? ['FABRIC', 'VTEP', 'OBJECTS', 'PEERS'] : []),
    ],
    rows,
  );
  for (const d of st.dpus) {
    if (d.reason) out += `${d.id}: ${d.reason}\n`;
    if (d.fabric?.note) out += `${d.id}: ${d.fabric.note}\n`;
  }
  if (st.fabric?.hostPort) out += `host port: ${formatHostPort(st.fabric.hostPort)}\n`;
  return out;
}

/** Carries the fabric (yes/no), its VTEP, objects acked/desired, peers reachable/total. */
function fabricColumns(d: DpuStatus): string[] {
  const f = d.fabric;
  if (!f) return ['-', '-', '-', '-'];
  if (!f.carries) return ['no', '-', '-', '-'];
  return [
    'yes',
    f.vtep || '-',
    `${f.objectsAcked}/${f.objectsDesired}`,
    // An agent away says nothing of its peers: its last word is no answer now.
    `${d.connected ? f.peersReachable : '?'}/${f.peersTotal}`,
  ];
}

function state(d: DpuStatus): string {
  if (d.healthy) return d.synced ? 'ready' : 'syncing';
  return d.connected ? 'silent' : 'away';
}
