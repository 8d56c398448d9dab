import { status } from '@grpc/grpc-js';
import { unavailable } from '../../core/errors';
import type { Logger } from '../../core/logger';
import type { Ack, Hello, PeerStatus, PortStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { AgentServer, type AgentCall, type AgentPeer, type TlsFiles } from './agent-server';
import { AgentSession, type SessionTiming } from './agent-session';
import { admitHello, type Admission } from './hello-admission';
import { monotonicMs } from '../../lib/monotonic-clock';

// The daemon's link to its DPU agents: the listener agents connect to, the sessions on it, which
// session holds each agent id's slot (a node may carry several DPUs, one session each), heartbeats (in
// AgentSession), and what is known of agents that went away. It knows nothing of ports: what arrives
// on an admitted session goes to the backend through LinkEvents, and the backend sends on the session
// the link hands it.

export interface AgentLinkOptions {
  /** Unix socket on which agents connect. */
  agentSocket: string;
  /** Optional TCP listener "HOST:PORT" for agents; requires `tls`. */
  agentListen?: string;
  tls?: TlsFiles;
  maxMessageBytes: number;
  /** Agents that may hold a session at once. */
  maxAgents: number;
  timing: SessionTiming;
  logger: Logger;
}

/** What the backend hears from the sessions holding agent slots. */
export interface LinkEvents {
  /** An agent's hello was accepted and it now holds its slot; `previous` is its last session's end. */
  established(session: AgentSession, previous: LostAgent | undefined): void;
  ack(session: AgentSession, ack: Ack): void;
  portStatus(session: AgentSession, ps: PortStatus): void;
  /** The agent sent a new inventory (session.inventory). */
  inventory(session: AgentSession): void;
  /** The agent said how it sees its fabric peers. */
  peerStatus(session: AgentSession, ps: PeerStatus): void;
  /** A slot's session ended, for whatever reason; called once per session. */
  lost(session: AgentSession, reason: string): void;
}

/** An agent that held its slot and went away. */
export interface LostAgent {
  agentId: string;
  bootId: string;
  /** When it went, monotonicMs(). */
  at: number;
  reason: string;
}

/** Agents that went away are remembered (for Status and messages); past this, the longest gone go. */
const MAX_LOST_AGENTS = 256;

export class AgentLink {
  private server: AgentServer | undefined;
  private readonly streams = new Set<AgentSession>();
  /** The session holding each agent id's slot (accepted hello). */
  private readonly holders = new Map<string, AgentSession>();
  /** Agents that held a slot and went away, by id, oldest first. */
  private readonly lostAgents = new Map<string, LostAgent>();
  /** Each returns true when it was served (and goes). */
  private readonly waiters: Array<(s: AgentSession) => boolean> = [];

  constructor(
    private readonly opts: AgentLinkOptions,
    private readonly events: LinkEvents,
  ) {}

  /** The TCP port agents can reach (when agentListen is set), e.g. after asking for port 0. */
  get tcpPort(): number | undefined {
    return this.server?.tcpPort;
  }

  /** The session holding `agentId`'s slot, healthy or not. */
  sessionOf(agentId: string): AgentSession | undefined {
    return this.holders.get(agentId);
  }

  /** Every session holding a slot, healthy or not, by agent id. */
  sessions(): AgentSession[] {
    return [...this.holders.values()].sort((a, b) => compare(a.agentId, b.agentId));
  }

  /** The agent's last session's end, while it holds no slot. */
  lostOf(agentId: string): LostAgent | undefined {
    return this.lostAgents.get(agentId);
  }

  /** Agents that went away and hold no slot, by id. */
  lost(): LostAgent[] {
    return [...this.lostAgents.values()].sort((a, b) => compare(a.agentId, b.agentId));
  }

  /** Whether any agent ever held a slot or holds one now. */
  get anyAgent(): boolean {
    return this.holders.size > 0 || this.lostAgents.size > 0;
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

  /**
   * The session changes for `agentId` may be sent on, or UNAVAILABLE at once: callers must not wait
   * for an agent.
   */
  requireHealthy(agentId: string): AgentSession {
    const s = this.holders.get(agentId);
    if (s?.healthy) return s;
    throw unavailable(this.whyUnavailable(agentId));
  }

  /** Why `agentId` cannot take a change now, for a person. */
  whyUnavailable(agentId: string): string {
    const s = this.holders.get(agentId);
    if (s) return `DPU agent ${s.agentId} has been silent for ${s.silenceMs} ms; retry once it is back`;
    const lost = this.lostAgents.get(agentId);
    if (lost)
      return `DPU agent ${lost.agentId} disconnected ${Math.round((monotonicMs() - lost.at) / 1000)} s ago (${lost.reason}); retry once it reconnects`;
    return `DPU agent ${agentId} is not connected on ${this.where()}; start it and retry`;
  }

  /** Why no agent can take a change now, for a person (no agent is healthy). */
  whyNoneHealthy(): string {
    const known = [...this.sessions().map((s) => s.agentId), ...this.lost().map((l) => l.agentId)];
    if (known.length === 0) return `no DPU agent is connected on ${this.where()}; start the agent and retry`;
    if (known.length === 1) return this.whyUnavailable(known[0] ?? '');
    return `no DPU agent is healthy (${known.map((id) => this.whyUnavailable(id)).join('; ')})`;
  }

  /**
   * The next session to take a slot (of `agentId`, when given), or undefined after `timeoutMs`.
   */
  waitForAgent(timeoutMs: number, agentId?: string): Promise<AgentSession | undefined> {
    return new Promise((resolve) => {
      const waiter = (s: AgentSession): boolean => {
        if (agentId !== undefined && s.agentId !== agentId) return false;
        clearTimeout(timer);
        resolve(s);
        return true;
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
          if (this.holders.get(s.agentId) === s) this.events.ack(s, ack);
        },
        portStatus: (s, ps) => {
          if (this.holders.get(s.agentId) === s) this.events.portStatus(s, ps);
        },
        inventory: (s) => {
          if (this.holders.get(s.agentId) === s) this.events.inventory(s);
        },
        peerStatus: (s, ps) => {
          if (this.holders.get(s.agentId) === s) this.events.peerStatus(s, ps);
        },
        closed: (s, reason) => this.closed(s, reason),
      },
      this.opts.timing,
      this.opts.logger,
    );
    this.streams.add(session);
  }

  private admit(s: AgentSession, hello: Hello): Admission {
    const held = this.holders.get(hello.agentId);
    const current = held && held !== s ? held : undefined;
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
      this.holders.size - (current ? 1 : 0),
      this.opts.maxAgents,
    );
    if (admission.ok && admission.replaces && current) {
      current.close(status.UNAVAILABLE, `replaced by session ${s.id} after going silent`);
    }
    return admission;
  }

  private established(s: AgentSession): void {
    const previous = this.lostAgents.get(s.agentId);
    this.holders.set(s.agentId, s);
    this.lostAgents.delete(s.agentId);
    for (const w of this.waiters.splice(0)) if (!w(s)) this.waiters.push(w);
    this.events.established(s, previous);
  }

  private closed(s: AgentSession, reason: string): void {
    this.streams.delete(s);
    if (this.holders.get(s.agentId) !== s) return;
    this.holders.delete(s.agentId);
    this.lostAgents.set(s.agentId, { agentId: s.agentId, bootId: s.bootId, at: monotonicMs(), reason });
    while (this.lostAgents.size > MAX_LOST_AGENTS) {
      const oldest = this.lostAgents.keys().next().value;
      if (oldest === undefined) break;
      this.lostAgents.delete(oldest);
    }
    this.events.lost(s, reason);
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
