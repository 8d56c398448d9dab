import { status } from '@grpc/grpc-js';
import { unavailable } from '../../core/errors';
import type { Logger } from '../../core/logger';
import type { Ack, Hello, PortStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AgentServer, type AgentCall, type AgentPeer, type TlsFiles } from './agent-server';
import { AgentSession, type SessionTiming } from './agent-session';
import { admitHello, type Admission } from './hello-admission';

// The daemon's link to its DPU agent: the listener agents connect to, the sessions on it, which one
// holds the agent slot, heartbeats (in AgentSession), and what is known of an agent that went away.
// It knows nothing of ports: what arrives on the admitted session goes to the backend through
// LinkEvents, and the backend sends on the session the link hands it.

export interface AgentLinkOptions {
  /** Unix socket on which agents connect. */
  agentSocket: string;
  /** Optional TCP listener "HOST:PORT" for agents; requires `tls`. */
  agentListen?: string;
  tls?: TlsFiles;
  maxMessageBytes: number;
  timing: SessionTiming;
  logger: Logger;
}

/** What the backend hears from the agent slot's session. */
export interface LinkEvents {
  /** An agent's hello was accepted and it now holds the slot. */
  established(session: AgentSession, previous: LostAgent | undefined): void;
  ack(session: AgentSession, ack: Ack): void;
  portStatus(session: AgentSession, ps: PortStatus): void;
  /** The slot's session ended, for whatever reason; called once per session. */
  lost(session: AgentSession, reason: string): void;
}

/** An agent that held the slot and went away. */
export interface LostAgent {
  agentId: string;
  bootId: string;
  at: number;
  reason: string;
}

export class AgentLink {
  private server: AgentServer | undefined;
  private readonly streams = new Set<AgentSession>();
  /** The session holding the agent slot (accepted hello), if any. */
  private holder: AgentSession | undefined;
  private lostAgent: LostAgent | undefined;
  private readonly waiters: Array<(s: AgentSession) => void> = [];

  constructor(
    private readonly opts: AgentLinkOptions,
    private readonly events: LinkEvents,
  ) {}

  /** The TCP port agents can reach (when agentListen is set), e.g. after asking for port 0. */
  get tcpPort(): number | undefined {
    return this.server?.tcpPort;
  }

  /** The session holding the slot, healthy or not. */
  get session(): AgentSession | undefined {
    return this.holder;
  }

  /** The agent that last held the slot, while none holds it. */
  get lost(): LostAgent | undefined {
    return this.lostAgent;
  }

  async start(): Promise<void> {
    if (this.server) return;
    const server = new AgentServer({
      socketPath: this.opts.agentSocket,
      listen: this.opts.agentListen || undefined,
      tls: this.opts.tls,
      maxMessageBytes: this.opts.maxMessageBytes,
      logger: this.opts.logger,
      onStream: (call, peer) => this.onStream(call, peer),
    });
    await server.start();
    this.server = server;
  }

  async stop(): Promise<void> {
    for (const s of [...this.streams]) s.close(status.OK, 'the daemon is stopping');
    await this.server?.stop();
    this.server = undefined;
  }

  /** The session changes may be sent on, or UNAVAILABLE at once: callers must not wait for an agent. */
  requireHealthy(): AgentSession {
    const s = this.holder;
    if (s?.healthy) return s;
    if (s)
      throw unavailable(
        `DPU agent ${s.agentId} has been silent for ${s.silenceMs} ms; retry once it is back`,
      );
    const lost = this.lostAgent;
    throw unavailable(
      lost
        ? `DPU agent ${lost.agentId} disconnected ${Math.round((Date.now() - lost.at) / 1000)} s ago (${lost.reason}); retry once it reconnects`
        : `no DPU agent is connected on ${this.where()}; start the agent and retry`,
    );
  }

  /** The next session to take the slot, or undefined after `timeoutMs`. */
  waitForAgent(timeoutMs: number): Promise<AgentSession | undefined> {
    return new Promise((resolve) => {
      const waiter = (s: AgentSession): void => {
        clearTimeout(timer);
        resolve(s);
      };
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Where agents connect, for messages. */
  where(): string {
    return `${this.opts.agentSocket}${this.opts.agentListen ? ` or ${this.opts.agentListen}` : ''}`;
  }

  private onStream(call: AgentCall, peer: AgentPeer): void {
    const session = new AgentSession(
      call,
      peer,
      {
        admit: (s, hello) => this.admit(s, hello),
        established: (s) => this.established(s),
        ack: (s, ack) => {
          if (this.holder === s) this.events.ack(s, ack);
        },
        portStatus: (s, ps) => {
          if (this.holder === s) this.events.portStatus(s, ps);
        },
        closed: (s, reason) => this.closed(s, reason),
      },
      this.opts.timing,
      this.opts.logger,
    );
    this.streams.add(session);
  }

  private admit(s: AgentSession, hello: Hello): Admission {
    const current = this.holder && this.holder !== s ? this.holder : undefined;
    const admission = admitHello(
      hello,
      s.peer,
      current && {
        id: current.id,
        agentId: current.agentId,
        peerAddress: current.peer.address,
        connectedAt: current.connectedAt,
        healthy: current.healthy,
      },
    );
    if (admission.ok && admission.replaces && current) {
      current.close(status.UNAVAILABLE, `replaced by session ${s.id} after going silent`);
    }
    return admission;
  }

  private established(s: AgentSession): void {
    const previous = this.lostAgent;
    this.holder = s;
    this.lostAgent = undefined;
    for (const w of this.waiters.splice(0)) w(s);
    this.events.established(s, previous);
  }

  private closed(s: AgentSession, reason: string): void {
    this.streams.delete(s);
    if (this.holder !== s) return;
    this.holder = undefined;
    this.lostAgent = { agentId: s.agentId, bootId: s.bootId, at: Date.now(), reason };
    this.events.lost(s, reason);
  }
}
