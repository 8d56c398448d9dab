import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  type Ack,
  type AgentMessage,
  type FabricObject,
  type PeerState,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricChange, FabricDataplane, FabricOutcome, Uplink } from './dataplane';
import { kindOf, type FabricTable } from './fabric-table';
import { validateFabricObject } from './fabric-validation';
import { PeerStatusDeltas } from './peer-status-deltas';

// The agent's fabric half (protocol version 3): it applies FabricObjects to the table and the
// dataplane, answers each with an ack of kind FABRIC, applies a snapshot's fabric part, and reports the
// peers (PeerStatus) after a change and on every heartbeat. The session (agent-session.ts) hands it
// each message and tells it when a session starts and ends.

/** The version that carries the fabric. */
export const FABRIC_PROTOCOL_VERSION = 3;
/** The feature of an agent that programs the fabric's objects. */
export const FABRIC_FEATURE = 'fabric-vxlan';
/** The daemon's feature that takes a PeerStatus of what changed only. */
export const PEER_STATUS_DELTA_FEATURE = 'peer-status-delta';
/** A burst of fabric changes is followed by one PeerStatus, this long after the last… */
const PEER_STATUS_COALESCE_MS = 100;
/** …or this long after the first, so that a steady stream of changes (a snapshot) still reports. */
const PEER_STATUS_MAX_DELAY_MS = 1000;

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

  constructor(private readonly o: FabricAgentOptions) {
    o.dataplane?.onHeldApplied?.((name, outcome) => this.heldApplied(name, outcome));
  }

  /**
   * An object refused for another's key is programmed now that the key is free: acked OK again at its
   * generation, so that the daemon counts it held without sending it anew.
   */
  private heldApplied(name: string, outcome: FabricOutcome): void {
    const o = this.o.table.get(name);
    if (!o || outcome.code !== 'ok' || !this.send || this.version < FABRIC_PROTOCOL_VERSION) return;
    this.send({
      ack: {
        name,
        generation: o.generation,
        code: AckCode.ACK_CODE_OK,
        retryable: false,
        message: '',
        kind: ObjectKind.OBJECT_KIND_FABRIC,
      },
    });
    this.o.changed();
    this.peerStatusChanged();
  }

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

  /**
   * A session was accepted at `version` by a daemon doing `daemonFeatures`; PeerStatus goes out
   * through `send`.
   */
  started(version: number, send: (m: AgentMessage) => void, daemonFeatures: readonly string[] = []): void {
    this.version = version;
    this.send = send;
    this.deltas.reset();
    this.sendDeltas = daemonFeatures.includes(PEER_STATUS_DELTA_FEATURE);
    if (this.o.table.hasPeers()) this.peerStatusChanged();
  }

  ended(): void {
    this.version = 0;
    this.send = undefined;
    clearTimeout(this.peerStatusTimer);
    this.peerStatusTimer = undefined;
    this.peerStatusFirst = undefined;
  }

  /**
   * A heartbeat tick: the protocol wants PeerStatus at least every interval while peers are held. The
   * tick's is read from the kernel afresh; one after a change may answer from what was programmed
   * since (reading every FDB entry and neighbour after each change would be most of its cost).
   */
  tick(): void {
    if (this.o.table.hasPeers()) void this.sendPeerStatus(true);
  }

  private peerStatusTimer: NodeJS.Timeout | undefined;
  /** When the first change of the burst the timer waits out came (performance.now()). */
  private peerStatusFirst: number | undefined;
  private peerStatusRunning = false;
  /** A fresh read was asked for while one was running: the next one reads afresh. */
  private peerStatusFresh = false;
  private lastPeerStatus: PeerState[] | undefined;
  private peerStatusesSent = 0;
  private readonly deltas = new PeerStatusDeltas();
  /** The daemon of this session takes deltas. */
  private sendDeltas = false;

  get peerStatusInfo(): { sent: number; last: PeerState[] | undefined } {
    return { sent: this.peerStatusesSent, last: this.lastPeerStatus };
  }

  /**
   * Sends every FabricPeer's state now (one at a time; a request meanwhile is served right after).
   * `fresh`: the dataplane reads the kernel again rather than answering from what it programmed.
   */
  async sendPeerStatus(fresh = false): Promise<void> {
    const fabric = this.o.dataplane;
    if (!fabric || this.version < FABRIC_PROTOCOL_VERSION || !this.send) return;
    if (this.peerStatusRunning) {
      this.peerStatusFresh ||= fresh;
      return this.peerStatusChanged();
    }
    this.peerStatusRunning = true;
    fresh ||= this.peerStatusFresh;
    this.peerStatusFresh = false;
    try {
      const peers = await fabric.peerStates(this.o.table, fresh);
      if (!this.send) return;
      this.send({ peerStatus: this.deltas.next(peers, this.sendDeltas) });
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
    if (this.version < FABRIC_PROTOCOL_VERSION) return;
    const now = performance.now();
    this.peerStatusFirst ??= now;
    clearTimeout(this.peerStatusTimer);
    const delay = Math.min(PEER_STATUS_COALESCE_MS, this.peerStatusFirst + PEER_STATUS_MAX_DELAY_MS - now);
    this.peerStatusTimer = setTimeout(
      () => {
        this.peerStatusTimer = undefined;
        this.peerStatusFirst = undefined;
        void this.sendPeerStatus();
      },
      Math.max(0, delay),
    );
  }

  /** Why this session cannot take fabric objects, or undefined when it can. */
  private refusal(): string | undefined {
    if (this.version < FABRIC_PROTOCOL_VERSION)
      return `fabric objects need protocol version ${FABRIC_PROTOCOL_VERSION}; this session speaks version ${this.version}`;
    if (!this.o.carries)
      return `this agent does not carry the fabric (feature "${FABRIC_FEATURE}" not advertised)`;
    return undefined;
  }

  /**
   * Applies FabricObjects received one after another, together: the table takes them all, then the
   * dataplane converges them in one go (a snapshot's burst costs a few kernel round trips, not one per
   * entry). One ack per object, in order, each with that object's own outcome.
   */
  async upsert(objects: readonly FabricObject[]): Promise<Ack[]> {
    const base = (o: FabricObject): Ack => ({
      name: o.name,
      generation: o.generation,
      code: AckCode.ACK_CODE_OK,
      retryable: false,
      message: '',
      kind: ObjectKind.OBJECT_KIND_FABRIC,
    });
    const refused = this.refusal();
    if (refused)
      return objects.map((o) => ({ ...base(o), code: AckCode.ACK_CODE_UNSUPPORTED, message: refused }));
    const { table: fabric, log } = this.o;
    const dataplane = this.o.dataplane!;
    const acks: Ack[] = objects.map(base);
    const valid: number[] = [];
    objects.forEach((o, i) => {
      const invalid = validateFabricObject(o);
      if (invalid) acks[i] = { ...acks[i]!, code: AckCode.ACK_CODE_INVALID, message: invalid };
      else {
        // Desired state is held even when programming fails: the next change or snapshot converges it.
        fabric.set(o);
        valid.push(i);
      }
    });
    if (valid.length === 0) return acks;
    this.o.changed();
    const changes = valid.map((i) => ({ name: objects[i]!.name, kind: kindOf(objects[i]!) }));
    const outcomes = await dataplane
      .apply(fabric, changes)
      .catch((err: unknown) =>
        changes.map(() => ({ code: 'failed' as const, message: (err as Error).message })),
      );
    this.peerStatusChanged();
    const notOk: string[] = [];
    valid.forEach((i, j) => {
      const outcome = outcomes[j] ?? { code: 'failed' as const, message: 'no outcome from the dataplane' };
      if (outcome.code !== 'ok') notOk.push(objects[i]!.name);
      if (outcome.code === 'invalid')
        acks[i] = { ...acks[i]!, code: AckCode.ACK_CODE_INVALID, message: outcome.message };
      else if (outcome.code === 'failed')
        acks[i] = {
          ...acks[i]!,
          code: AckCode.ACK_CODE_INTERNAL,
          retryable: true,
          message: `dataplane: ${outcome.message}`,
        };
    });
    // One line per batch, not per object: at debug level a line per object is a good part of a snapshot.
    log.debug(
      {
        objects: changes.length,
        first: changes[0]!.name,
        last: changes.at(-1)!.name,
        ...(notOk.length > 0 ? { notOk: notOk.slice(0, 20), notOkCount: notOk.length } : {}),
      },
      'fabric objects applied',
    );
    return acks;
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
    return (await this.removeAll([name])).get(name);
  }

  /** Forgets fabric objects and removes what they programmed, together; the errors, by name. */
  private async removeAll(names: readonly string[]): Promise<Map<string, string>> {
    const fabric = this.o.table;
    const changes: FabricChange[] = [];
    for (const name of names) {
      const held = fabric.delete(name);
      if (held) changes.push({ name, kind: kindOf(held) });
    }
    const failed = new Map<string, string>();
    if (changes.length === 0) return failed;
    const outcomes =
      (await this.o.dataplane
        ?.apply(fabric, changes)
        .catch((err: unknown) =>
          changes.map(() => ({ code: 'failed' as const, message: (err as Error).message })),
        )) ?? [];
    this.o.changed();
    this.peerStatusChanged();
    changes.forEach((c, i) => {
      const outcome = outcomes[i];
      if (outcome?.code !== 'failed') return;
      this.o.log.warn({ object: c.name, err: outcome.message }, 'removing a fabric object failed');
      failed.set(c.name, outcome.message);
    });
    return failed;
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
    // Everything but the VTEP together (the dataplane removes routes before what they use), the VTEP
    // last: nothing is left pointing at what went before it.
    const removeLast = unlisted.filter((n) => kindOf(fabric.get(n)!) === 'vtep');
    for (const batch of [unlisted.filter((n) => !removeLast.includes(n)), removeLast]) {
      const failed = await this.removeAll(batch);
      for (const name of batch)
        if (!failed.has(name)) log.info({ object: name }, 'stale fabric object removed after sync');
    }
    try {
      await this.o.dataplane?.prune(fabric);
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not prune the fabric after sync');
    }
  }
}
