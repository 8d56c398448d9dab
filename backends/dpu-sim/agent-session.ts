// One stream between the agent and the daemon, from dial to end: the hello, heartbeats both ways (a
// daemon gone silent ends the stream), every message handled in the order it came (FabricObject
// upserts received back to back in one batch), each change acked once it is kept. Its own file
// because a stream's state (its queue, its acks, whether it ended) lives exactly as long as the stream,
// while agent-client.ts outlives many of them and keeps what a session changes.

import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AckCode,
  ObjectKind,
  type Ack,
  type AgentMessage,
  type ControllerMessage,
  type DpuAgentServiceClient,
  type FabricObject,
  type HelloAccept,
  type SnapshotBegin,
  type SyncComplete,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AckDelivery } from './ack-delivery';
import type { FabricAgent } from './fabric-agent';
import type { FaultInjector } from './fault-injection';
import type { PolicyAgent } from './policy-agent';
import type { PortAgent } from './port-agent';
import type { SessionInfo } from './state-file';

type Call = grpc.ClientDuplexStream<AgentMessage, ControllerMessage>;

/** Sends on the session; `flushed`: resolves once the message has left (a crash waits for it). */
export type SessionSend = (msg: AgentMessage, flushed?: boolean) => Promise<void>;

/** What a session does to the agent that outlives it. */
export interface SessionHooks {
  log: Logger;
  faults: FaultInjector;
  /** Treat SnapshotBegin/SyncComplete as unknown. */
  ignoreSnapshot: boolean;
  acks: AckDelivery;
  ports: PortAgent;
  fabric: FabricAgent;
  /** Present when the agent enforces NetworkPolicy and the session speaks version 4. */
  policy(): PolicyAgent | undefined;
  /** The hello was accepted at `version`: the agent starts speaking on the session. */
  accepted(accept: HelloAccept, version: number, send: SessionSend): void;
  rejected(reason: string): void;
  snapshotBegun(begin: SnapshotBegin): void;
  /** A port, fabric or policy object the running snapshot lists. */
  listed(kind: 'port' | 'fabric' | 'policy', name: string): void;
  syncComplete(done: SyncComplete, send: SessionSend): Promise<void>;
  /** The stream ended (once). */
  ended(info: SessionInfo, session: AgentSession): void;
  /** The agent is stopping: an error ending the stream is the stop's. */
  stopped(): boolean;
}

export class AgentSession {
  private readonly call: Call;
  private accepted = false;
  private ended = false;
  // Intervals on the monotonic clock: a wall-clock step must not look like the daemon going silent
  // (lib/monotonic-clock.ts says why; the simulator imports nothing of the core).
  private lastReceived = performance.now();
  private heartbeat: NodeJS.Timeout | undefined;
  private queue: Promise<void> = Promise.resolve();
  /** Acks leave in the order of their changes, each once its change is kept. */
  private acks: Promise<void> = Promise.resolve();
  /** The batch of fabric Upserts still waiting its turn: later ones join it. */
  private fabricBatch: FabricObject[] | undefined;
  private resolve: (accepted: boolean) => void = () => undefined;

  constructor(
    client: DpuAgentServiceClient,
    private readonly h: SessionHooks,
  ) {
    this.call = client.connect();
  }

  /** Says hello and runs until the stream ends; resolves with whether the hello was accepted. */
  run(hello: AgentMessage): Promise<boolean> {
    const { call, h } = this;
    const done = new Promise<boolean>((resolve) => (this.resolve = resolve));
    call.on('data', (msg: ControllerMessage) => this.received(msg));
    call.on('error', (err: grpc.ServiceError) => {
      if (h.stopped()) return this.end({ state: 'disconnected', reason: 'stopped' });
      const reason = `${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`;
      h.log.warn({ reason }, 'stream ended');
      this.end({ state: 'disconnected', reason });
    });
    call.on('end', () => this.end({ state: 'disconnected', reason: 'the daemon ended the stream' }));
    call.on('status', (st: grpc.StatusObject) => {
      if (st.code === grpc.status.OK)
        this.end({ state: 'disconnected', reason: 'the daemon ended the stream' });
    });
    call.write(hello);
    return done;
  }

  /** Ends the stream (the agent stops). */
  cancel(): void {
    this.call.cancel();
  }

  private end(info: SessionInfo): void {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.heartbeat);
    this.h.ended(info, this);
    this.resolve(this.accepted);
  }

  // Writes are queued in order by the stream; only a crash has to wait for one to leave.
  private readonly send: SessionSend = (msg, flushed = false) => {
    if (this.ended) return Promise.resolve();
    if (!flushed) {
      this.call.write(msg);
      return Promise.resolve();
    }
    return new Promise((done) => this.call.write(msg, () => done()));
  };

  private received(msg: ControllerMessage): void {
    this.lastReceived = performance.now();
    const fabric = msg.upsert?.fabric;
    if (!fabric) {
      // Nothing received after this message may be handled before it.
      this.fabricBatch = undefined;
      this.enqueue(() => this.handle(msg));
    } else if (this.fabricBatch) this.fabricBatch.push(fabric);
    else {
      const batch = [fabric];
      this.fabricBatch = batch;
      this.enqueue(() => this.handleFabricUpserts(batch));
    }
  }

  private enqueue(run: () => Promise<void>): void {
    this.queue = this.queue
      .then(() => (this.h.acks.crashing ? undefined : run()))
      .catch((err: unknown) => {
        this.h.log.error({ err: (err as Error).message }, 'failed to handle a daemon message');
      });
  }

  /** The drop-stream fault: the stream ends instead of the change being applied. */
  private dropStream(what: Record<string, string>): void {
    this.h.log.warn(what, 'fault injection: dropping the stream instead of applying a change');
    this.call.cancel();
  }

  private async handle(msg: ControllerMessage): Promise<void> {
    const { h } = this;
    if (this.ended) return;
    if (msg.helloAccept) this.start(msg.helloAccept);
    else if (msg.helloReject) h.rejected(msg.helloReject.reason);
    else if (msg.snapshotBegin) {
      if (!h.ignoreSnapshot) h.snapshotBegun(msg.snapshotBegin);
    } else if (msg.upsert?.port) {
      if (h.faults.onChange() === 'drop-stream') return this.dropStream({ port: msg.upsert.port.name });
      h.listed('port', msg.upsert.port.name);
      await this.acked(await h.ports.upsert(msg.upsert.port));
    } else if (msg.upsert?.policy) {
      const o = msg.upsert.policy;
      h.listed('policy', o.name);
      const policy = h.policy();
      await this.acked(policy ? await policy.upsert(o) : unsupported(o.name, o.generation));
    } else if (msg.delete?.kind === ObjectKind.OBJECT_KIND_POLICY) {
      const { name, generation } = msg.delete;
      const policy = h.policy();
      await this.acked(policy ? await policy.delete(name, generation) : unsupported(name, generation));
    } else if (msg.delete?.kind === ObjectKind.OBJECT_KIND_FABRIC) {
      if (h.faults.onChange() === 'drop-stream') return this.dropStream({ object: msg.delete.name });
      await this.acked(await h.fabric.delete(msg.delete.name, msg.delete.generation));
    } else if (msg.delete) {
      if (h.faults.onChange() === 'drop-stream') return this.dropStream({ port: msg.delete.name });
      await this.acked(await h.ports.delete(msg.delete.name, msg.delete.generation));
    } else if (msg.syncComplete) {
      if (!h.ignoreSnapshot) await h.syncComplete(msg.syncComplete, this.send);
    }
  }

  /** Queues the ack of one change; a crash due now waits for the acks before it to leave. */
  private async acked(ack: Ack): Promise<void> {
    this.acks = this.h.acks.after(this.acks, this.send, ack);
    if (this.h.faults.shouldCrash()) await this.acks;
  }

  /** The hello was accepted: the agent speaks, and heartbeats keep the session alive. */
  private start(accept: HelloAccept): void {
    this.accepted = true;
    const interval = Math.max(10, accept.heartbeatIntervalMs || 1000);
    // A version 1 daemon does not say; it speaks version 1.
    const version = accept.protocolVersion || 1;
    this.h.log.info(
      {
        sessionId: accept.sessionId,
        heartbeatIntervalMs: interval,
        version,
        daemon: accept.capabilities,
      },
      'hello accepted',
    );
    this.h.accepted(accept, version, this.send);
    let seq = 0;
    let lastTick = performance.now();
    this.heartbeat = setInterval(() => {
      const now = performance.now();
      // A late tick means this process stalled; the daemon's messages may be unread, not missing.
      const stalled = now - lastTick > 2 * interval;
      lastTick = now;
      if (!stalled && now - this.lastReceived > 3 * interval) {
        this.h.log.warn(
          { silenceMs: Math.round(now - this.lastReceived) },
          'the daemon went silent; reconnecting',
        );
        this.call.cancel();
        return;
      }
      seq += 1;
      this.call.write({ heartbeat: { seq, sentAtUnixMs: Date.now() } });
      this.h.fabric.tick();
    }, interval);
  }

  /**
   * FabricObject Upserts received back to back, applied together (a snapshot's 10,000 in a few
   * batches), each acked with its own outcome; each still counts as one change for the faults.
   */
  private async handleFabricUpserts(objects: FabricObject[]): Promise<void> {
    if (this.fabricBatch === objects) this.fabricBatch = undefined;
    for (let next = 0; next < objects.length && !this.ended;) {
      const { run, drop, crash } = this.h.faults.takeRun(objects, next);
      next += run.length + (drop ? 1 : 0);
      for (const o of run) this.h.listed('fabric', o.name);
      const results = run.length > 0 ? await this.h.fabric.upsert(run) : [];
      this.acks = this.h.acks.after(this.acks, this.send, results, crash);
      if (drop) return this.dropStream({ object: drop.name });
      if (crash) return this.acks;
    }
  }
}

/** The ack of a policy object sent to an agent that does not enforce policy. */
function unsupported(name: string, generation: number): Ack {
  return {
    name,
    generation,
    code: AckCode.ACK_CODE_UNSUPPORTED,
    message: 'this agent does not enforce NetworkPolicy (no "network-policy" feature)',
    retryable: false,
    kind: ObjectKind.OBJECT_KIND_POLICY,
  };
}
