#!/usr/bin/env node
import { randomUUID } from 'node:crypto';
import { Command, InvalidArgumentError, Option } from 'commander';
import pino from 'pino';
import { AgentClient, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION } from './agent-client';
import * as net from 'node:net';
import { NoDataplane, type Dataplane } from './dataplane';
import { FabricTable, kindOf } from './fabric-table';
import { RecordedFabric } from './recorded-fabric';
import { FaultInjector, INJECTED_CODES, type InjectedErrorCode } from './fault-injection';
import { PortTable } from './port-table';
import { StateFile, readStateFile, type SimState } from './state-file';
import { VfPool } from './vf-pool';

// workloadnet-dpu-sim: a DPU agent in a process. It speaks the real agent protocol to a workloadnet
// daemon, keeps its own port table, can misbehave on request, and can plumb real interfaces in a
// namespace standing for the DPU so that workload traffic really crosses it.

/** Exit code of an injected crash, so a test can tell it from a real one. */
export const CRASH_EXIT_CODE = 70;

interface CliOptions {
  controller: string;
  agentId: string;
  bootId?: string;
  dataplane: 'none' | 'netns';
  keepVfs: boolean;
  dpuNetns?: string;
  hostNetns?: string;
  stateFile?: string;
  ackLatencyMs: number;
  stateWriteDelayMs: number;
  errorRate: number;
  errorCode: InjectedErrorCode;
  dropStreamAfter: number;
  crashAfter: number;
  ignoreSnapshot: boolean;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsServerName?: string;
  maxPorts: number;
  pfs: number;
  vfsPerPf: number;
  protocol: { min: number; max: number };
  withoutFeatures: string[];
  fabric: boolean;
  vtepAddress?: string;
  seed?: number;
  backoffMaxMs: number;
  logLevel: string;
}

function nonNegativeInt(v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a whole number >= 0');
  return n;
}

function rate(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 1)
    throw new InvalidArgumentError('expected a number between 0 and 1');
  return n;
}

function versionRange(v: string): { min: number; max: number } {
  const m = /^(\d+)(?:-(\d+))?$/.exec(v);
  const min = Number(m?.[1]);
  const max = m?.[2] === undefined ? min : Number(m[2]);
  if (!m || min < 1 || max < min) throw new InvalidArgumentError('expected VERSION or MIN-MAX, e.g. 1-2');
  return { min, max };
}

function ipAddress(v: string): string {
  if (net.isIP(v) === 0) throw new InvalidArgumentError('expected an IPv4 or IPv6 address');
  return v;
}

function featureList(v: string): string[] {
  return v.split(',').filter(Boolean);
}

function controllerTarget(v: string): string {
  if (v.startsWith('unix:')) {
    if (!v.slice(5).startsWith('/')) throw new InvalidArgumentError('expected unix:/absolute/path');
    return v;
  }
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:/\s]+):\d{1,5}$/.test(v))
    throw new InvalidArgumentError('expected unix:PATH or HOST:PORT');
  return v;
}

export function buildCommand(): Command {
  return new Command('workloadnet-dpu-sim')
    .description(
      'Simulated DPU agent: connects to a workloadnet daemon over the DPU agent protocol, keeps its own ' +
        'port table, can inject faults, and can plumb real interfaces in a network namespace standing for the DPU.',
    )
    .requiredOption(
      '--controller <target>',
      'daemon to connect to: unix:PATH or HOST:PORT (TCP needs --tls-*)',
      controllerTarget,
    )
    .requiredOption('--agent-id <id>', 'agent identity (over TLS it must match the certificate CN or a SAN)')
    .option(
      '--boot-id <id>',
      'boot identity; reusing the one in --state-file keeps its ports (default: a new random id = state lost)',
    )
    .addOption(
      new Option(
        '--dataplane <mode>',
        'none: control plane only; netns: real veths between --host-netns and --dpu-netns',
      )
        .choices(['none', 'netns'])
        .default('none'),
    )
    .option(
      '--dpu-netns <name>',
      'netns mode: name (under /var/run/netns) or path of the namespace standing for the DPU',
    )
    .option(
      '--keep-vfs',
      'netns mode: a start keeps the VFs (and representors) an earlier one left, each for its port, as a ' +
        'DPU whose agent restarts keeps its NIC running; without it a new boot removes them (a power cycle)',
      false,
    )
    .option(
      '--host-netns <path>',
      "netns mode: namespace where the ports' VF ends appear (the daemon's host side); default this process's",
    )
    .option(
      '--state-file <file>',
      'JSON file rewritten atomically on every change: {agentId, bootId, synced, session, ports}',
    )
    .option('--ack-latency-ms <n>', 'delay every ack by N ms', nonNegativeInt, 0)
    .option(
      '--state-write-delay-ms <n>',
      'a slow disk: each --state-file write lands N ms after it was taken (acks wait for it)',
      nonNegativeInt,
      0,
    )
    .option('--error-rate <p>', 'refuse each Upsert with probability p (0..1)', rate, 0)
    .addOption(
      new Option('--error-code <code>', 'ack code of refused Upserts')
        .choices(Object.keys(INJECTED_CODES))
        .default('internal'),
    )
    .option(
      '--drop-stream-after <n>',
      'cancel the stream instead of handling the Nth change, once (0 = never)',
      nonNegativeInt,
      0,
    )
    .option(
      '--crash-after <n>',
      `exit with code ${CRASH_EXIT_CODE} right after acking the Nth change (0 = never)`,
      nonNegativeInt,
      0,
    )
    .option(
      '--ignore-snapshot',
      'treat snapshot markers as unknown: never remove stale ports (a broken agent)',
      false,
    )
    .option('--tls-cert <file>', 'client certificate (PEM) for HOST:PORT controllers')
    .option('--tls-key <file>', 'client key (PEM)')
    .option('--tls-ca <file>', 'CA (PEM) that signed the daemon certificate')
    .option('--tls-server-name <name>', 'expected name in the daemon certificate, when it differs from HOST')
    .option(
      '--max-ports <n>',
      'port table size; further ports are refused with NO_RESOURCES (0 = unlimited)',
      nonNegativeInt,
      0,
    )
    .option('--pfs <n>', 'PFs of the simulated DPU (1-64)', nonNegativeInt, 2)
    .option(
      '--vfs-per-pf <n>',
      'VFs per PF (1-4096); one per port, NO_RESOURCES when none is free',
      nonNegativeInt,
      2048,
    )
    .addOption(
      new Option('--protocol <versions>', 'protocol versions to offer, VERSION or MIN-MAX')
        .argParser(versionRange)
        .default(
          { min: MIN_PROTOCOL_VERSION, max: PROTOCOL_VERSION },
          `${MIN_PROTOCOL_VERSION}-${PROTOCOL_VERSION}`,
        ),
    )
    .option(
      '--without-features <list>',
      'comma-separated features not to advertise (and to refuse), e.g. qos-rate,pf-select',
      featureList,
    )
    .option(
      '--no-fabric',
      'carry no fabric: never advertise "fabric-vxlan" nor state an uplink (protocol version 3 still spoken)',
    )
    .option(
      '--vtep-address <address>',
      "the VTEP (uplink) address to state in Hello; netns mode defaults to the DPU namespace's default-route " +
        'interface address, none mode carries the fabric only when given one',
      ipAddress,
    )
    .option('--seed <n>', 'seed for --error-rate decisions (default: random)', nonNegativeInt)
    .option('--backoff-max-ms <n>', 'longest wait between reconnect attempts', nonNegativeInt, 2000)
    .addOption(
      new Option('--log-level <level>', 'log level (JSON lines on stderr)')
        .choices(['trace', 'debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    )
    .addHelpText(
      'after',
      `
Examples:
  workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-0 --state-file /tmp/dpu-0.json
  workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-1 --pfs 2 --vfs-per-pf 64
  workloadnet-dpu-sim --controller 10.0.0.1:7443 --agent-id dpu-0 --tls-cert a.crt --tls-key a.key --tls-ca ca.crt
  ip netns add dpu && workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-0 \\
      --dataplane netns --dpu-netns dpu

Exit codes: 0 after SIGTERM/SIGINT, ${CRASH_EXIT_CODE} after --crash-after, 1 on a startup error.`,
    );
}

async function createDataplane(
  o: CliOptions,
  table: PortTable,
  pool: VfPool,
  log: pino.Logger,
): Promise<Dataplane> {
  // A range without version 3 never carries the fabric: nothing of it is even opened.
  const fabric = o.fabric && o.protocol.max >= 3;
  if (o.dataplane === 'none')
    return new NoDataplane(fabric && o.vtepAddress ? new RecordedFabric(o.vtepAddress) : undefined);
  if (!o.dpuNetns) throw new Error('--dataplane netns needs --dpu-netns');
  // Loaded only in netns mode, so the control-plane-only simulator needs no native FFI at all.
  const { NetnsDataplane } = await import('./netns-dataplane');
  const keepRepresentors = table.entries().flatMap((e) => (e.representor ? [e.representor] : []));
  return NetnsDataplane.open({
    dpuNetns: o.dpuNetns,
    hostNetns: o.hostNetns,
    keepRepresentors,
    keepVfs: o.keepVfs,
    agentTag: pool.tag,
    fabric,
    vtepAddress: o.vtepAddress,
    log,
  });
}

/** Programs the resumed fabric again, all together: the device is adopted as it is, entries replaced in place. */
async function resumeFabric(dataplane: Dataplane, fabric: FabricTable, log: pino.Logger): Promise<void> {
  if (!dataplane.fabric || fabric.size === 0) return;
  const rank = { vtep: 0, peer: 1, prefix: 2, route: 3 } as const;
  const objects = fabric.entries().sort((a, b) => rank[kindOf(a) ?? 'route'] - rank[kindOf(b) ?? 'route']);
  const outcomes = await dataplane.fabric.apply(
    fabric,
    objects.map((o) => ({ name: o.name, kind: kindOf(o) })),
  );
  objects.forEach((o, i) => {
    const outcome = outcomes[i];
    if (outcome?.code !== 'ok')
      log.warn({ object: o.name, outcome }, 'a resumed fabric object is not programmed');
  });
  log.info({ objects: fabric.size }, 'resumed the fabric of the same boot');
}

export async function main(argv: string[]): Promise<void> {
  const o = buildCommand().parse(argv).opts<CliOptions>();
  const log = pino(
    { level: o.logLevel, base: { svc: 'workloadnet-dpu-sim', agentId: o.agentId } },
    pino.destination(2),
  );
  const tlsGiven = [o.tlsCert, o.tlsKey, o.tlsCa].filter(Boolean).length;
  if (tlsGiven !== 0 && tlsGiven !== 3) throw new Error('--tls-cert, --tls-key and --tls-ca go together');
  if (tlsGiven === 3 && o.controller.startsWith('unix:'))
    throw new Error('TLS is only used with a HOST:PORT controller');

  const bootId = o.bootId ?? randomUUID();
  const table = new PortTable(o.maxPorts);
  const fabric = new FabricTable();
  const pool = new VfPool(o.agentId, o.pfs, o.vfsPerPf);
  o.withoutFeatures ??= [];
  // The same boot id means the DPU kept its state across an agent restart: pick up the ports it held.
  const previous = o.stateFile ? readStateFile(o.stateFile) : undefined;
  if (previous && previous.agentId === o.agentId && previous.bootId === bootId) {
    for (const p of previous.ports) {
      const { endpoint, representor, vf, ...port } = p;
      // A VF the current pool no longer has (run with fewer VFs) is given a new one on the next change.
      if (vf && vf.pf < pool.pfs && vf.vf < pool.vfsPerPf) pool.claim(port.name, vf);
      table.set({ port, endpoint, representor, vf });
    }
    for (const f of previous.fabric ?? []) fabric.set(f);
    log.info({ ports: table.size, fabric: fabric.size }, 'resumed the port table of the same boot');
  }
  const dataplane = await createDataplane(o, table, pool, log);
  // Each kept VF stays its port's: no other port is given it while the daemon has yet to send that one.
  for (const a of dataplane.adopted?.() ?? []) {
    if (a.slot.pf < pool.pfs && a.slot.vf < pool.vfsPerPf && !pool.slotOf(a.port)) pool.claim(a.port, a.slot);
  }
  await resumeFabric(dataplane, fabric, log);
  const faults = new FaultInjector({
    ackLatencyMs: o.ackLatencyMs,
    errorRate: o.errorRate,
    errorCode: o.errorCode,
    dropStreamAfter: o.dropStreamAfter,
    crashAfter: o.crashAfter,
    seed: o.seed ?? Math.floor(Math.random() * 2 ** 31),
  });

  // `client` is declared below; render only runs once the state file is first written, after that.
  const render = (): SimState => ({
    agentId: o.agentId,
    bootId,
    pid: process.pid,
    synced: client.synced,
    epoch: client.epoch,
    session: client.session,
    protocolVersion: client.protocolVersion,
    inventoriesSent: client.inventoryInfo.sent,
    ...(client.inventoryInfo.last
      ? {
          inventory: {
            ...client.inventoryInfo.last,
            // Every VF would make the file huge; the PFs with their counts say what tests need.
            pfs: client.inventoryInfo.last.pfs.map(({ vfs: _vfs, ...pf }) => pf),
          },
        }
      : {}),
    ports: table.entries().map((e) => ({
      ...e.port,
      ...(e.endpoint ? { endpoint: e.endpoint } : {}),
      ...(e.representor ? { representor: e.representor } : {}),
      ...(e.vf ? { vf: e.vf } : {}),
    })),
    fabric: fabric.entries(),
    ...(client.uplink ? { uplink: client.uplink } : {}),
    peerStatusesSent: client.peerStatusInfo.sent,
    ...(client.peerStatusInfo.last ? { peerStatus: client.peerStatusInfo.last } : {}),
  });
  const state = new StateFile(o.stateFile, render, o.stateWriteDelayMs);
  const client: AgentClient = new AgentClient({
    controller: o.controller,
    agentId: o.agentId,
    bootId,
    tls:
      tlsGiven === 3
        ? { cert: o.tlsCert!, key: o.tlsKey!, ca: o.tlsCa!, serverName: o.tlsServerName }
        : undefined,
    ignoreSnapshot: o.ignoreSnapshot,
    backoffMaxMs: o.backoffMaxMs,
    table,
    fabric,
    pool,
    protocol: o.protocol,
    withoutFeatures: o.withoutFeatures,
    dataplane,
    faults,
    changed: () => state.changed(),
    kept: () => state.kept(),
    crash: () => {
      state.writeNow();
      // Let the last ack leave the socket before the process disappears, like firmware dying right
      // after it answered.
      setTimeout(() => process.exit(CRASH_EXIT_CODE), 20);
    },
    log,
  });
  log.info({ controller: o.controller, bootId, dataplane: o.dataplane }, 'starting');
  state.changed();

  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    void (async () => {
      await client.stop();
      await state.flush();
      state.writeNow();
      await dataplane.close();
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  await client.run();
}

if (require.main === module) {
  main(process.argv).catch((err: unknown) => {
    process.stderr.write(`workloadnet-dpu-sim: ${(err as Error).message}\n`);
    process.exit(1);
  });
}
