import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { LogRate } from '../../lib/log-rate';
import type { Logger } from '../../core/logger';
import type {
  Ack,
  AgentMessage,
  ControllerMessage,
  Hello,
  Inventory,
  PeerStatus,
  PortStatus,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AgentInventory } from './agent-inventory';
import { refusedMessage } from './agent-message-limit';
import type { AgentCall, AgentPeer } from './agent-server';
import { HEARTBEATS_PER_INTERVAL, HeartbeatGate } from './heartbeat-gate';
import { DAEMON_FEATURES, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, type Admission } from './hello-admission';
import { PeerStatusGate } from './peer-status-gate';
import { PortStatusGate } from './port-status-gate';
import { monotonicMs } from '../../lib/monotonic-clock';

// One agent's stream, from its first message to its end. The session enforces the protocol's framing
// (hello first and once, liveness, the rates of heartbeats and statuses) and hands everything that carries meaning to its
// host, the backend, which decides about admission and owns the desired state.

export interface SessionHost {
  /** Decides whether a hello is accepted (version, identity, duplicate sessions). */
  admit(session: AgentSession, hello: Hello): Admission;
  /** The hello was accepted; the host sends the snapshot. */
  established(session: AgentSession): void;
  ack(session: AgentSession, ack: Ack): void;
  portStatus(session: AgentSession, ps: PortStatus): void;
  /** A new inventory was accepted (session.inventory holds it). */
  inventory(session: AgentSession): void;
  /** How the agent sees its fabric peers (version 3). */
  peerStatus(session: AgentSession, ps: PeerStatus): void;
  /** The stream ended, for whatever reason; called exactly once per session. */
  closed(session: AgentSession, reason: string): void;
}

export interface SessionTiming {
  heartbeatIntervalMs: number;
  /** Silence longer than this ends the session. */
  heartbeatTimeoutMs: number;
}

type SessionState = 'awaiting-hello' | 'active' | 'closed';

function kindOf(msg: AgentMessage): string {
  if (msg.hello) return 'hello';
  if (msg.ack) return 'ack';
  if (msg.portStatus) return 'port_status';
  if (msg.heartbeat) return 'heartbeat';
  if (msg.inventory) return 'inventory';
  if (msg.peerStatus) return 'peer_status';
  return 'empty';
}

export class AgentSession {
  readonly id = randomUUID();
  /** When the stream opened, wall clock (ms since the epoch), for people; ages use openedAt. */
  readonly connectedAt = Date.now();
  private readonly openedAt = monotonicMs();
  private stateValue: SessionState = 'awaiting-hello';
  private helloValue: Hello | undefined;
  private versionValue = 0;
  private inventoryValue: AgentInventory | undefined;
  private inventoryAt: number | undefined;
  private readonly inventoryLog = new LogRate(undefined, monotonicMs);
  /** These and the other instants below are monotonicMs(). */
  private lastReceived = monotonicMs();
  private lastHeartbeat: number | undefined;
  private heartbeatSeq = 0;
  private lastWatch = 0;
  private readonly timers: NodeJS.Timeout[] = [];
  /** Heartbeats over the rate are dropped, a flood of them ends the stream (see heartbeat-gate.ts). */
  private readonly heartbeats: HeartbeatGate;
  /** Repeats and floods of PortStatus stop here (see port-status-gate.ts). */
  private readonly portStatuses = new PortStatusGate();
  /** PeerStatus floods are coalesced, or end the stream (see peer-status-gate.ts). */
  private readonly peerStatuses: PeerStatusGate;
  private readonly closedListeners: Array<() => void> = [];
  private readonly dropLog = new LogRate(undefined, monotonicMs);
  private readonly log: Logger;

  constructor(
    private readonly call: AgentCall,
    readonly peer: AgentPeer,
    private readonly host: SessionHost,
    private readonly timing: SessionTiming,
    logger: Logger,
  ) {
    this.log = logger.child({ session: this.id, peer: peer.address });
    this.heartbeats = new HeartbeatGate(timing.heartbeatIntervalMs);
    this.peerStatuses = new PeerStatusGate(timing.heartbeatIntervalMs);
    call.on('data', (msg: AgentMessage) => this.onMessage(msg));
    call.on('end', () => this.close(status.UNAVAILABLE, 'the agent closed the stream'));
    call.on('error', (err: Error) => this.close(status.UNAVAILABLE, `stream error: ${err.message}`));
    // gRPC ends a call whose agent sent a message over its receive limit as a cancel, and writes the
    // status it answered with only after that: the cause is read once the current events are done.
    const ended = (code: status, reason: string): void => {
      setImmediate(() => {
        const refused = refusedMessage(call);
        if (refused)
          this.close(
            status.RESOURCE_EXHAUSTED,
            `the agent sent a message of ${refused.bytes} bytes, over the limit of ${refused.limit} bytes; the daemon ended the stream`,
          );
        else this.close(code, reason);
      });
    };
    call.on('cancelled', () => ended(status.CANCELLED, 'the agent cancelled the stream'));
    call.on('close', () => ended(status.UNAVAILABLE, 'the stream closed'));
    // An agent that connects and says nothing holds a stream for nothing.
    this.timers.push(
      setTimeout(() => {
        if (this.stateValue === 'awaiting-hello') {
          this.close(
            status.DEADLINE_EXCEEDED,
            `no Hello within ${timing.heartbeatTimeoutMs} ms of connecting`,
          );
        }
      }, timing.heartbeatTimeoutMs),
    );
    this.log.debug('agent stream opened');
  }

  get state(): SessionState {
    return this.stateValue;
  }

  get hello(): Hello | undefined {
    return this.helloValue;
  }

  /** The protocol version the session speaks (0 before the hello is accepted). */
  get version(): number {
    return this.versionValue;
  }

  /** The agent's latest accepted inventory (version 2 agents). */
  get inventory(): AgentInventory | undefined {
    return this.inventoryValue;
  }

  /** When it arrived (ms since the epoch). */
  get inventoryReceivedAt(): number | undefined {
    return this.inventoryAt;
  }

  /** Whether the agent advertised `feature` in its hello. */
  hasFeature(feature: string): boolean {
    return this.helloValue?.capabilities?.features.includes(feature) ?? false;
  }

  get agentId(): string {
    return this.helloValue?.agentId ?? '';
  }

  get bootId(): string {
    return this.helloValue?.bootId ?? '';
  }

  /** Milliseconds since the last heartbeat from the agent (or since the hello, before the first one). */
  get heartbeatAgeMs(): number {
    return monotonicMs() - (this.lastHeartbeat ?? this.openedAt);
  }

  /** Milliseconds since the agent last sent anything. */
  get silenceMs(): number {
    return monotonicMs() - this.lastReceived;
  }

  /** Accepted and heard from recently: the only state in which changes are sent. */
  get healthy(): boolean {
    return this.stateValue === 'active' && this.silenceMs <= this.timing.heartbeatTimeoutMs;
  }

  /** Queues one message to the agent; false when the session is over. */
  send(msg: ControllerMessage): boolean {
    if (this.stateValue === 'closed' || this.call.destroyed || this.call.writableEnded) return false;
    this.call.write(msg);
    return true;
  }

  /** Calls `listener` once the session has ended (after the host heard of it). */
  onClosed(listener: () => void): void {
    if (this.stateValue === 'closed') listener();
    else this.closedListeners.push(listener);
  }

  /**
   * Ends the session. Any code but OK is sent to the agent as the stream's status with `reason`, so the
   * agent's log says why it was dropped.
   */
  close(code: status, reason: string): void {
    if (this.stateValue === 'closed') return;
    const wasActive = this.stateValue === 'active';
    this.stateValue = 'closed';
    for (const t of this.timers) clearTimeout(t);
    // A cancelled call has no one left to tell.
    if (!this.call.cancelled && !this.call.destroyed && !this.call.writableEnded) {
      if (code === status.OK) this.call.end();
      else this.call.emit('error', { code, details: reason });
    }
    const level = wasActive && code !== status.OK ? 'warn' : 'info';
    this.log[level](
      { agentId: this.agentId || undefined, code: status[code], reason },
      'agent session ended',
    );
    this.host.closed(this, reason);
    for (const l of this.closedListeners.splice(0)) l();
  }

  private violation(code: status, reason: string): void {
    this.log.warn({ agentId: this.agentId || undefined, reason }, 'agent protocol violation');
    this.close(code, reason);
  }

  private onMessage(msg: AgentMessage): void {
    if (this.stateValue === 'closed') return;
    this.lastReceived = monotonicMs();
    const kind = kindOf(msg);
    if (this.stateValue === 'awaiting-hello') {
      if (!msg.hello) {
        this.violation(status.INVALID_ARGUMENT, `the first message must be Hello, got ${kind}`);
        return;
      }
      this.onHello(msg.hello);
      return;
    }
    switch (kind) {
      case 'hello':
        this.violation(
          status.INVALID_ARGUMENT,
          'Hello was sent twice on one stream; reconnect to start a new session',
        );
        return;
      case 'ack':
        if (msg.ack) this.host.ack(this, msg.ack);
        return;
      case 'port_status':
        if (msg.portStatus) this.onPortStatus(msg.portStatus);
        return;
      case 'heartbeat':
        this.onHeartbeat();
        return;
      case 'inventory':
        if (msg.inventory) this.onInventory(msg.inventory);
        return;
      case 'peer_status':
        if (msg.peerStatus) this.onPeerStatus(msg.peerStatus);
        return;
      default:
        // A newer agent may send a message kind this daemon does not know; it is not an error.
        this.log.debug('ignoring an agent message of unknown kind');
    }
  }

  private onHello(hello: Hello): void {
    this.helloValue = hello;
    const admission = this.host.admit(this, hello);
    if (!admission.ok) {
      this.log.warn(
        { agentId: hello.agentId, bootId: hello.bootId, reason: admission.reason },
        'agent hello rejected',
      );
      this.send({ helloReject: { reason: admission.reason } });
      this.close(admission.code, admission.reason);
      return;
    }
    this.stateValue = 'active';
    this.versionValue = admission.version;
    this.lastHeartbeat = monotonicMs();
    this.send({
      helloAccept: {
        sessionId: this.id,
        heartbeatIntervalMs: this.timing.heartbeatIntervalMs,
        protocolVersion: admission.version,
        capabilities: {
          minProtocolVersion: MIN_PROTOCOL_VERSION,
          maxProtocolVersion: PROTOCOL_VERSION,
          features: DAEMON_FEATURES,
        },
      },
    });
    this.log.info(
      {
        agentId: hello.agentId,
        bootId: hello.bootId,
        version: admission.version,
        capabilities: hello.capabilities,
      },
      'agent session established',
    );
    this.lastWatch = monotonicMs();
    this.timers.push(setInterval(() => this.tick(), this.timing.heartbeatIntervalMs));
    // Silence is judged four times per interval, so a stalled agent is dropped within a quarter interval
    // of the limit rather than up to a whole one after it.
    this.timers.push(setInterval(() => this.watch(), this.watchPeriodMs));
    this.host.established(this);
  }

  private onHeartbeat(): void {
    const verdict = this.heartbeats.offer();
    if (verdict.counted) {
      this.lastHeartbeat = monotonicMs();
      return;
    }
    if (verdict.firstInWindow) {
      this.log.warn(
        { agentId: this.agentId, limitPerInterval: HEARTBEATS_PER_INTERVAL },
        'agent heartbeats above the rate limit are being dropped',
      );
    }
    if (verdict.flood) this.violation(status.RESOURCE_EXHAUSTED, verdict.flood);
  }

  private onInventory(inv: Inventory): void {
    if (this.versionValue < 2) {
      if (this.inventoryLog.take('v1') !== undefined)
        this.log.warn({ agentId: this.agentId }, 'inventory from a version 1 session ignored');
      return;
    }
    const parsed = AgentInventory.parse(inv);
    if (typeof parsed === 'string') {
      // The previous inventory stays: a broken update must not widen what the guard accepts.
      if (this.inventoryLog.take('bad') !== undefined)
        this.log.warn({ agentId: this.agentId, reason: parsed }, 'agent inventory refused');
      return;
    }
    this.inventoryValue = parsed;
    this.inventoryAt = Date.now();
    this.log.debug(
      { agentId: this.agentId, pfs: parsed.pfs.length, vfTotal: parsed.vfTotal, vfFree: parsed.vfFree },
      'agent inventory',
    );
    this.host.inventory(this);
  }

  private onPortStatus(ps: PortStatus): void {
    const passed = this.portStatuses.offer(ps);
    if (passed) this.host.portStatus(this, passed);
    else if (this.dropLog.take('port-status') !== undefined) this.reportDroppedStatuses();
  }

  private onPeerStatus(ps: PeerStatus): void {
    const passed = this.peerStatuses.offer(ps);
    const flood = this.peerStatuses.flood;
    if (flood) this.violation(status.RESOURCE_EXHAUSTED, flood);
    else if (passed) this.host.peerStatus(this, passed);
    else if (this.dropLog.take('peer-status') !== undefined)
      this.log.warn(
        { agentId: this.agentId, held: this.peerStatuses.takeHeld() },
        'agent peer statuses over the rate are held and merged into one (none of what they say is lost)',
      );
  }

  private reportDroppedStatuses(): void {
    const { duplicates, limited } = this.portStatuses.takeCounts();
    if (duplicates + limited === 0) return;
    this.log.warn(
      { agentId: this.agentId, duplicates, overRate: limited },
      'agent port statuses dropped: repeats of the last state, or over the per-port rate (the latest is kept)',
    );
  }

  private get watchPeriodMs(): number {
    return Math.max(10, Math.floor(this.timing.heartbeatIntervalMs / 4));
  }

  private tick(): void {
    if (this.stateValue !== 'active') return;
    for (const ps of this.portStatuses.due()) this.host.portStatus(this, ps);
    const peers = this.peerStatuses.due();
    if (peers) this.host.peerStatus(this, peers);
    this.heartbeatSeq += 1;
    this.send({ heartbeat: { seq: this.heartbeatSeq, sentAtUnixMs: Date.now() } });
  }

  private watch(): void {
    if (this.stateValue !== 'active') return;
    const now = monotonicMs();
    const late = now - this.lastWatch - this.watchPeriodMs;
    this.lastWatch = now;
    // A check that fires far too late means this process was busy, and the agent's messages may be
    // sitting unread in the socket: judge its silence on the next check instead of blaming it.
    if (late > this.timing.heartbeatIntervalMs) {
      this.log.warn({ lateMs: late }, 'event loop stalled; skipping one liveness check');
    } else if (this.silenceMs > this.timing.heartbeatTimeoutMs) {
      this.close(
        status.UNAVAILABLE,
        `no message from the agent for ${this.silenceMs} ms (limit ${this.timing.heartbeatTimeoutMs} ms)`,
      );
    }
  }
}
