import * as grpc from '@grpc/grpc-js';
import {
  DpuAgentServiceClient,
  type AgentMessage,
  type ControllerMessage,
  type Hello,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';

// A hand-driven agent for protocol tests: it sends exactly what the test says, including things a
// correct agent never would, and records everything the daemon sends back.

export interface StreamEnd {
  code: grpc.status;
  details: string;
}

export class RawAgent {
  readonly received: ControllerMessage[] = [];
  readonly ended: Promise<StreamEnd>;
  private readonly client: DpuAgentServiceClient;
  private readonly call: grpc.ClientDuplexStream<AgentMessage, ControllerMessage>;
  private waiters: Array<() => void> = [];
  private endValue: StreamEnd | undefined;
  private keepAliveTimer: NodeJS.Timeout | undefined;

  constructor(socketPath: string) {
    this.client = new DpuAgentServiceClient(`unix:${socketPath}`, grpc.credentials.createInsecure());
    this.call = this.client.connect();
    this.call.on('data', (m: ControllerMessage) => {
      this.received.push(m);
      this.notify();
    });
    this.ended = new Promise((resolve) => {
      this.call.on('error', (err: grpc.ServiceError) => {
        this.endValue ??= { code: err.code, details: err.details };
        resolve(this.endValue);
        this.notify();
      });
      this.call.on('status', (st: grpc.StatusObject) => {
        this.endValue ??= { code: st.code, details: st.details };
        resolve(this.endValue);
        this.notify();
      });
    });
  }

  private notify(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  static hello(agentId: string, over: Partial<Hello> = {}): AgentMessage {
    return {
      hello: {
        agentId,
        bootId: `boot-${agentId}`,
        protocolVersion: 1,
        capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: [] },
        minProtocolVersion: 0,
        maxProtocolVersion: 0,
        uplinkAddresses: [],
        uplinkMtu: 0,
        ...over,
      },
    };
  }

  send(msg: AgentMessage): void {
    this.call.write(msg);
  }

  /**
   * Sends a heartbeat every `intervalMs`, as a real agent does, so that a test about something else is
   * not ended by the daemon's silence limit when it pauses between messages.
   */
  keepAlive(intervalMs: number): void {
    let seq = 0;
    clearInterval(this.keepAliveTimer);
    this.keepAliveTimer = setInterval(() => {
      if (!this.isEnded) this.send({ heartbeat: { seq: ++seq, sentAtUnixMs: Date.now() } });
    }, intervalMs);
  }

  /** Messages written and not yet handed to the transport (a flood paces itself on this). */
  get queued(): number {
    return this.call.writableLength;
  }

  get isEnded(): boolean {
    return this.endValue !== undefined;
  }

  /** The first received message (from `from` on) that matches, waiting for it if needed. */
  async next(
    pred: (m: ControllerMessage) => boolean,
    what: string,
    timeoutMs = 5000,
    from = 0,
  ): Promise<ControllerMessage> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const found = this.received.slice(from).find(pred);
      if (found) return found;
      if (this.endValue)
        throw new Error(
          `stream ended (${grpc.status[this.endValue.code]}: ${this.endValue.details}) before ${what}`,
        );
      const left = until - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs} ms`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Waits for the daemon to end the stream and returns its status. */
  async end(timeoutMs = 5000): Promise<StreamEnd> {
    return Promise.race([
      this.ended,
      new Promise<StreamEnd>((_, rej) =>
        setTimeout(() => rej(new Error(`stream not ended within ${timeoutMs} ms`)), timeoutMs),
      ),
    ]);
  }

  close(): void {
    clearInterval(this.keepAliveTimer);
    this.call.cancel();
    this.client.close();
  }
}
