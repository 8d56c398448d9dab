import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  type Ack,
  type AgentMessage,
  type FabricObject,
  type PeerState,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricDataplane, Uplink } from './dataplane';
import { kindOf, type FabricTable } from './fabric-table';
import { validateFabricObject } from './fabric-validation';

// The agent's fabric half (protocol version 3): it applies FabricObjects to the table and the
// dataplane, answers each with an ack of kind FABRIC, applies a snapshot's fabric part, and reports the
// peers (PeerStatus) after a change and on every heartbeat. The session (agent-client.ts) hands it
// each message and tells it when a session starts and ends.

/** The version that carries the fabric. */
export const FABRIC_PROTOCOL_VERSION = 3;
/** The feature of an agent that programs the fabric's objects. */
export const FABRIC_FEATURE = 'fabric-vxlan';
/** A burst of fabric changes is followed by one PeerStatus, this long after the last. */
const PEER_STATUS_COALESCE_MS = 100;

/** What a snapshot said about the fabric. */
export interface FabricSnapshot {
  epoch: number;
  seenFabric: Set<string>;
  keepUnlistedFabric: boolean;
}

export interface FabricAgentOptions {
  table: FabricTable;
  dataplane: FabricDataplane | undefined;
  /** Whether the hello offers the fabric (feature "fabric-vxlan"). */
  carries: boolean;
  changed: () => void;
  log: Logger;
}

export class FabricAgent {
  private version = 0;
  private send: ((m: AgentMessage) => void) | undefined;
  private uplinkValue: Uplink | undefined;

  constructor(private readonly o: FabricAgentOptions) {}

  get carries(): boolean {
    return this.o.carries;
  }

  /** The uplink the last hello stated (undefined: none, the agent carries no fabric). */
  get uplink(): Uplink | undefined {
    return this.uplinkValue;
  }

  /** The uplink for the next hello, read at every dial: its address or MTU may have changed. */
  async readUplink(): Promise<Uplink | undefined> {
    this.uplinkValue = undefined;
    if (!this.o.carries || !this.o.dataplane) return undefined;
    try {
      this.uplinkValue = await this.o.dataplane.uplink();
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'could not read the uplink; announcing none');
    }
    return this.uplinkValue;
  }

  /** A session was accepted at `version`; PeerStatus goes out through `send`. */
  started(version: number, send: (m: AgentMessage) => void): void {
    this.version = version;
    this.send = send;
    if (this.o.table.hasPeers()) this.peerStatusChanged();
  }

  ended(): void {
    this.version = 0;
    this.send = undefined;
    clearTimeout(this.peerStatusTimer);
    this.peerStatusTimer = undefined;
  }

  /** A heartbeat tick: the protocol wants PeerStatus at least every interval while peers are held. */
  tick(): void {
    if (this.o.table.hasPeers()) void this.sendPeerStatus();
  }

  private peerStatusTimer: NodeJS.Timeout | undefined;
  private peerStatusRunning = false;
  private lastPeerStatus: PeerState[] | undefined;
  private peerStatusesSent = 0;

  get peerStatusInfo(): { sent: number; last: PeerState[] | undefined } {
    return { sent: this.peerStatusesSent, last: this.lastPeerStatus };
  }

  /** Sends every FabricPeer's state now (one at a time; a request meanwhile is served right after). */
  async sendPeerStatus(): Promise<void> {
    const fabric = this.o.dataplane;
    if (!fabric || this.version < FABRIC_PROTOCOL_VERSION || !this.send) return;
    if (this.peerStatusRunning) return this.peerStatusChanged();
    this.peerStatusRunning = true;
    try {
      const peers = await fabric.peerStates(this.o.table);
      if (!this.send) return;
      this.send({ peerStatus: { peers } });
      this.lastPeerStatus = peers;
      this.peerStatusesSent += 1;
      this.o.changed();
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'could not read the state of the peers');
    } finally {
      this.peerStatusRunning = false;
    }
  }

  /** The fabric changed: a PeerStatus soon, once for a burst. */
  peerStatusChanged(): void {
    if (this.peerStatusTimer || this.version < FABRIC_PROTOCOL_VERSION) return;
    this.peerStatusTimer = setTimeout(() => {
      this.peerStatusTimer = undefined;
      void this.sendPeerStatus();
    }, PEER_STATUS_COALESCE_MS);
  }

  /** Why this session cannot take fabric objects, or undefined when it can. */
  private refusal(): string | undefined {
    if (this.version < FABRIC_PROTOCOL_VERSION)
      return `fabric objects need protocol version ${FABRIC_PROTOCOL_VERSION}; this session speaks version ${this.version}`;
    if (!this.o.carries)
      return `this agent does not carry the fabric (feature "${FABRIC_FEATURE}" not advertised)`;
    return undefined;
  }

  async upsert(o: FabricObject): Promise<Ack> {
    const base = {
      name: o.name,
      generation: o.generation,
      retryable: false,
      message: '',
      kind: ObjectKind.OBJECT_KIND_FABRIC,
    };
    const refused = this.refusal();
    if (refused) return { ...base, code: AckCode.ACK_CODE_UNSUPPORTED, message: refused };
    const invalid = validateFabricObject(o);
    if (invalid) return { ...base, code: AckCode.ACK_CODE_INVALID, message: invalid };
    const { table: fabric, log } = this.o;
    const dataplane = this.o.dataplane!;
    // Desired state is held even when programming fails: the next change or snapshot converges it.
    fabric.set(o);
    this.o.changed();
    const outcome = await dataplane.apply(fabric, o.name, kindOf(o)).catch((err: unknown) => ({
      code: 'failed' as const,
      message: (err as Error).message,
    }));
    this.peerStatusChanged();
    log.debug({ object: o.name, generation: o.generation, outcome }, 'fabric object applied');
    if (outcome.code === 'invalid')
      return { ...base, code: AckCode.ACK_CODE_INVALID, message: outcome.message };
    if (outcome.code === 'failed')
      return {
        ...base,
        code: AckCode.ACK_CODE_INTERNAL,
        retryable: true,
        message: `dataplane: ${outcome.message}`,
      };
    return { ...base, code: AckCode.ACK_CODE_OK };
  }

  async delete(name: string, generation: number): Promise<Ack> {
    const base = { name, generation, retryable: false, message: '', kind: ObjectKind.OBJECT_KIND_FABRIC };
    const held = this.o.table.get(name);
    if (!held) return { ...base, code: AckCode.ACK_CODE_OK };
    const outcome = await this.remove(name);
    if (outcome)
      return { ...base, code: AckCode.ACK_CODE_INTERNAL, retryable: true, message: `dataplane: ${outcome}` };
    return { ...base, code: AckCode.ACK_CODE_OK };
  }

  /** Forgets a fabric object and removes what it programmed; the error, when removing failed. */
  private async remove(name: string): Promise<string | undefined> {
    const fabric = this.o.table;
    const held = fabric.get(name);
    if (!held) return undefined;
    fabric.delete(name);
    const outcome = await this.o.dataplane?.apply(fabric, name, kindOf(held)).catch((err: unknown) => ({
      code: 'failed' as const,
      message: (err as Error).message,
    }));
    this.o.changed();
    this.peerStatusChanged();
    if (outcome?.code === 'failed') {
      this.o.log.warn({ object: name, err: outcome.message }, 'removing a fabric object failed');
      return outcome.message;
    }
    return undefined;
  }

  /**
   * The fabric half of a complete snapshot: objects it did not list go, unless the daemon's peer table
   * is not complete yet (keep_unlisted_fabric); then the kernel is pruned of objects of ours nobody
   * wants any more (left by an earlier boot or a crash between a change and its record).
   */
  async completeSync(snap: FabricSnapshot): Promise<void> {
    const { table: fabric, log } = this.o;
    const unlisted = fabric.names().filter((n) => !snap.seenFabric.has(n));
    if (snap.keepUnlistedFabric) {
      if (unlisted.length > 0)
        log.warn(
          { epoch: snap.epoch, kept: unlisted },
          "the daemon's peer table is not complete: keeping fabric objects the snapshot does not list",
        );
      return;
    }
    // Routes first, the VTEP last: nothing is left pointing at what went before it.
    const rank = (n: string): number =>
      n.startsWith('route/') ? 0 : n.startsWith('prefix/') ? 1 : n.startsWith('peer/') ? 2 : 3;
    for (const name of unlisted.sort((a, b) => rank(a) - rank(b))) {
      const err = await this.remove(name);
      if (err === undefined) log.info({ object: name }, 'stale fabric object removed after sync');
    }
    try {
      await this.o.dataplane?.prune(fabric);
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not prune the fabric after sync');
    }
  }
}
