// The agent's port half: it programs a port the daemon upserts (validated, checked against the table's
// room, the features offered, the injected faults and the VF pool), removes a deleted one, and after a
// whole snapshot removes the ports it did not list. Each change answers an ack of kind PORT. Its own
// file as fabric-agent.ts is the fabric half's: the session (agent-session.ts) hands it each message.

import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  PortOperState,
  type Ack,
  type AgentMessage,
  type Port,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { Dataplane } from './dataplane';
import type { FaultInjector } from './fault-injection';
import type { PortTable } from './port-table';
import { unsupportedFeature, validatePort } from './port-validation';
import type { VfPool } from './vf-pool';

export interface PortAgentOptions {
  table: PortTable;
  pool: VfPool;
  dataplane: Dataplane;
  faults: FaultInjector;
  log: Logger;
  /** Called after every change of the table, to persist it. */
  changed: () => void;
  /** The features the hello advertises (a port that needs another is refused). */
  features: () => string[];
  /** The pool's free VFs changed: the daemon is told soon. */
  inventoryChanged: () => void;
  /** A port was programmed or removed: NetworkPolicy follows it (throws when it cannot). */
  portsChanged?: () => Promise<void>;
}

export class PortAgent {
  constructor(private readonly o: PortAgentOptions) {}

  async upsert(port: Port): Promise<Ack> {
    const base = {
      name: port.name,
      generation: port.generation,
      retryable: false,
      message: '',
      kind: ObjectKind.OBJECT_KIND_PORT,
    };
    const invalid = validatePort(port);
    if (invalid) return { ...base, code: AckCode.ACK_CODE_INVALID, message: invalid };
    const { table, faults, dataplane, log } = this.o;
    if (!table.hasRoomFor(port.name)) {
      return {
        ...base,
        code: AckCode.ACK_CODE_NO_RESOURCES,
        retryable: true,
        message: `port table full (${table.maxPorts} ports)`,
      };
    }
    const unsupported = unsupportedFeature(port, this.o.features());
    if (unsupported) return { ...base, code: AckCode.ACK_CODE_UNSUPPORTED, message: unsupported };
    const injected = faults.injectedError();
    if (injected) return { ...base, code: injected.code, message: injected.message };
    const previous = table.get(port.name);
    const { pool } = this.o;
    const slot = pool.allocate(port.name, port.pf);
    if (!slot) {
      return {
        ...base,
        code: AckCode.ACK_CODE_NO_RESOURCES,
        retryable: true,
        message:
          port.pf === undefined
            ? `no free VF (all ${pool.total} in use)`
            : `no free VF on PF ${port.pf} (${pool.vfsPerPf} in use, or no such PF)`,
      };
    }
    try {
      const { endpoint, representor } = await dataplane.program(port, previous, pool.identity(slot));
      table.set({ port, endpoint, representor, vf: slot });
      // Its rules go in before its ack: the daemon hands the port to its workload on the ack.
      await this.o.portsChanged?.();
      this.o.inventoryChanged();
      this.o.changed();
      log.debug(
        { port: port.name, generation: port.generation, endpoint: endpoint?.netdev, representor },
        'port programmed',
      );
      return { ...base, code: AckCode.ACK_CODE_OK, endpoint };
    } catch (err) {
      if (!previous) pool.release(port.name);
      log.warn({ port: port.name, err: (err as Error).message }, 'programming a port failed');
      return {
        ...base,
        code: AckCode.ACK_CODE_INTERNAL,
        retryable: true,
        message: `dataplane: ${(err as Error).message}`,
      };
    }
  }

  async delete(name: string, generation: number): Promise<Ack> {
    const base = { name, generation, retryable: false, message: '', kind: ObjectKind.OBJECT_KIND_PORT };
    const entry = this.o.table.get(name);
    if (entry) {
      try {
        await this.o.dataplane.remove(entry);
      } catch (err) {
        return {
          ...base,
          code: AckCode.ACK_CODE_INTERNAL,
          retryable: true,
          message: `dataplane: ${(err as Error).message}`,
        };
      }
      this.o.table.delete(name);
      this.o.pool.release(name);
      this.o.inventoryChanged();
      this.o.changed();
      await this.o.portsChanged?.().catch((err: unknown) => {
        this.o.log.warn({ port: name, err: (err as Error).message }, 'policy not updated for a removed port');
      });
    }
    // Deleting what is not there is success: the daemon's wish is already true.
    return { ...base, code: AckCode.ACK_CODE_OK };
  }

  /**
   * After a whole snapshot: removes the ports it did not list, each reported REMOVED; kept all when
   * the daemon's store is new (`keepUnlisted`), with a warning naming them.
   */
  async completeSync(
    snap: { epoch: number; seen: ReadonlySet<string>; keepUnlisted: boolean },
    send: (m: AgentMessage) => Promise<void>,
  ): Promise<void> {
    const { log, table, dataplane } = this.o;
    const epoch = snap.epoch;
    if (snap.keepUnlisted) {
      const kept = table.names().filter((n) => !snap.seen.has(n));
      if (kept.length > 0) {
        log.warn({ epoch, kept }, "the daemon's store is new: keeping ports the snapshot does not list");
      }
    }
    for (const name of snap.keepUnlisted ? [] : table.names()) {
      if (snap.seen.has(name)) continue;
      const entry = table.get(name);
      if (!entry) continue;
      try {
        await dataplane.remove(entry);
      } catch (err) {
        log.warn({ port: name, err: (err as Error).message }, 'could not remove a stale port');
        continue;
      }
      table.delete(name);
      this.o.pool.release(name);
      this.o.inventoryChanged();
      log.info({ port: name }, 'stale port removed after sync');
      await send({
        portStatus: {
          name,
          operState: PortOperState.PORT_OPER_STATE_REMOVED,
          message: 'not in the snapshot',
        },
      });
    }
    if (!snap.keepUnlisted) await this.releaseAdopted(snap.seen);
  }

  /** VFs kept from an earlier start (--keep-vfs) whose ports a whole snapshot did not list: gone. */
  private async releaseAdopted(listed: ReadonlySet<string>): Promise<void> {
    const { dataplane, table, pool } = this.o;
    const gone = (await dataplane.releaseAdopted?.(listed)) ?? [];
    // A port that took another VF since holds that one in the pool now.
    for (const name of gone) if (!table.has(name)) pool.release(name);
    if (gone.length > 0) this.o.inventoryChanged();
  }
}
