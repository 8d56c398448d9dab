#!/usr/bin/env node
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { AgentClient } from './agent-client';
import { NoDataplane, type Dataplane } from './dataplane';
import { FabricTable, kindOf } from './fabric-table';
import { RecordedFabric } from './recorded-fabric';
import { FaultInjector } from './fault-injection';
import { PortTable } from './port-table';
import { CRASH_EXIT_CODE, buildCommand, type CliOptions } from './sim-cli';
import { StateFile, readStateFile, type SimState } from './state-file';
import { VfPool } from './vf-pool';

// workloadnet-dpu-sim: a DPU agent in a process. It speaks the real agent protocol to a workloadnet
// daemon, keeps its own port table, can misbehave on request, and can plumb real interfaces in a
// namespace standing for the DPU so that workload traffic really crosses it.

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

/** The same boot id means the DPU kept its state across an agent restart: picks up the ports it held. */
function resumePorts(
  o: CliOptions,
  bootId: string,
  table: PortTable,
  fabric: FabricTable,
  pool: VfPool,
  log: pino.Logger,
): void {
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
}

/** What the state file holds: the session, the inventory, the ports and the fabric as they are now. */
function simState(
  agentId: string,
  bootId: string,
  client: AgentClient,
  table: PortTable,
  fabric: FabricTable,
): SimState {
  return {
    agentId,
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
  };
}

/** SIGTERM and SIGINT stop the agent cleanly: the state file written last, the dataplane closed, exit 0. */
function stopOnSignals(client: AgentClient, state: StateFile, dataplane: Dataplane, log: pino.Logger): void {
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
  resumePorts(o, bootId, table, fabric, pool, log);
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
  const render = (): SimState => simState(o.agentId, bootId, client, table, fabric);
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

  stopOnSignals(client, state, dataplane, log);
  await client.run();
}

if (require.main === module) {
  main(process.argv).catch((err: unknown) => {
    process.stderr.write(`workloadnet-dpu-sim: ${(err as Error).message}\n`);
    process.exit(1);
  });
}
