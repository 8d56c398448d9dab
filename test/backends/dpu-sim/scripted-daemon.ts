import * as grpc from '@grpc/grpc-js';
import {
  AckCode,
  DpuAgentServiceService,
  ObjectKind,
  type Ack,
  type AgentMessage,
  type ControllerMessage,
  type FabricObject,
  type Hello,
  type PeerStatus,
  type Port,
} from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { waitUntil } from '../../support/wait-until';

// The daemon's side of the agent protocol, driven by the test: it accepts an agent's hello with the
// version and features the test says, sends exactly the snapshot and changes the test says, and records
// what the agent answers (hello, acks, PeerStatus). The reverse of test/support/raw-agent.ts, for
// testing the simulator without the daemon.

export interface Session {
  hello: Hello;
  call: grpc.ServerDuplexStream<AgentMessage, ControllerMessage>;
  acks: Ack[];
  peerStatus: PeerStatus[];
  ended: boolean;
}

export class ScriptedDaemon {
  readonly sessions: Session[] = [];
  private epoch = 0;
  private generation = 0;

  private constructor(
    private readonly server: grpc.Server,
    readonly socket: string,
    private readonly accept: { version: number; features: string[]; heartbeatIntervalMs: number },
  ) {}

  static async start(
    socket: string,
    accept: Partial<{ version: number; features: string[]; heartbeatIntervalMs: number }> = {},
  ): Promise<ScriptedDaemon> {
    const server = new grpc.Server();
    const d = new ScriptedDaemon(server, socket, {
      version: accept.version ?? 3,
      features: accept.features ?? ['inventory', 'keep-unlisted', 'fabric'],
      heartbeatIntervalMs: accept.heartbeatIntervalMs ?? 200,
    });
    server.addService(DpuAgentServiceService, { connect: (call: Session['call']) => d.connect(call) });
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
    return d;
  }

  private connect(call: Session['call']): void {
    let session: Session | undefined;
    const beat = setInterval(() => {
      if (session && !session.ended) call.write({ heartbeat: { seq: 1, sentAtUnixMs: Date.now() } });
    }, this.accept.heartbeatIntervalMs);
    const end = (): void => {
      clearInterval(beat);
      if (session) session.ended = true;
    };
    call.on('data', (m: AgentMessage) => {
      if (m.hello) {
        session = { hello: m.hello, call, acks: [], peerStatus: [], ended: false };
        this.sessions.push(session);
        const offered = m.hello.maxProtocolVersion || m.hello.protocolVersion;
        call.write({
          helloAccept: {
            sessionId: `s${this.sessions.length}`,
            heartbeatIntervalMs: this.accept.heartbeatIntervalMs,
            protocolVersion: Math.min(offered, this.accept.version),
            capabilities: {
              minProtocolVersion: 1,
              maxProtocolVersion: this.accept.version,
              features: this.accept.features,
            },
          },
        });
      } else if (m.ack) session?.acks.push(m.ack);
      else if (m.peerStatus) session?.peerStatus.push(m.peerStatus);
    });
    call.on('end', () => {
      end();
      call.end();
    });
    call.on('error', end);
    call.on('cancelled', end);
  }

  /** The current (last) session, once an agent said hello. */
  async session(timeoutMs = 10_000): Promise<Session> {
    await waitUntil(() => this.sessions.some((s) => !s.ended), 'an agent session', timeoutMs);
    return this.sessions.filter((s) => !s.ended).at(-1)!;
  }

  /** A new generation for an object the test builds. */
  nextGeneration(): number {
    return ++this.generation;
  }

  /** Sends a full snapshot: the ports given (none by default) and the fabric objects. */
  snapshot(
    s: Session,
    objects: FabricObject[],
    opts: { keepUnlistedFabric?: boolean; ports?: Port[] } = {},
  ): number {
    const epoch = ++this.epoch;
    const ports = opts.ports ?? [];
    s.call.write({
      snapshotBegin: { epoch, keepUnlisted: false, keepUnlistedFabric: opts.keepUnlistedFabric ?? false },
    });
    for (const port of ports) s.call.write({ upsert: { port } });
    for (const o of objects) s.call.write({ upsert: { fabric: o } });
    s.call.write({ syncComplete: { epoch, portCount: ports.length, fabricCount: objects.length } });
    return epoch;
  }

  upsertPort(s: Session, port: Port): void {
    s.call.write({ upsert: { port } });
  }

  upsert(s: Session, o: FabricObject): void {
    s.call.write({ upsert: { fabric: o } });
  }

  delete(s: Session, name: string): number {
    const generation = this.nextGeneration();
    s.call.write({ delete: { name, generation, reason: '', kind: ObjectKind.OBJECT_KIND_FABRIC } });
    return generation;
  }

  /** Waits for the ack of `name` at `generation`. */
  async ackOf(s: Session, name: string, generation: number, timeoutMs = 10_000): Promise<Ack> {
    await waitUntil(
      () => s.acks.some((a) => a.name === name && a.generation === generation),
      `the ack of ${name} at generation ${generation} (last acks: ${JSON.stringify(s.acks.slice(-3))})`,
      timeoutMs,
    );
    return s.acks.find((a) => a.name === name && a.generation === generation)!;
  }

  /** Waits until every object is acked at its generation, and returns those acks. */
  async allAcked(s: Session, objects: FabricObject[], timeoutMs = 10_000): Promise<Ack[]> {
    return Promise.all(objects.map((o) => this.ackOf(s, o.name, o.generation, timeoutMs)));
  }

  async stop(): Promise<void> {
    for (const s of this.sessions) if (!s.ended) s.call.end();
    await new Promise<void>((resolve) => this.server.tryShutdown(() => resolve()));
    this.server.forceShutdown();
  }
}

export const OK = AckCode.ACK_CODE_OK;
