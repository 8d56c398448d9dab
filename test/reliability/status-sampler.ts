import * as grpc from '@grpc/grpc-js';
import { WorkloadNetworkingClient } from '../../proto/gen/workloadnet/v1/workload';

// Samples Status latency at a fixed interval while a load runs: the daemon's responsiveness under
// load is what an operator (and a readiness probe) sees. The sampler has a connection of its own, as
// a separate client process would: grpc-js otherwise shares one HTTP/2 connection between channels to
// the same socket, and Status would wait in the load's queue rather than the daemon's. Samples
// overlap when the daemon is slow, so a stall shows up in every call that was waiting through it.

export interface StatusLatency {
  samples: number;
  failures: number;
  maxMs: number;
  p50Ms: number;
  p99Ms: number;
}

export class StatusSampler {
  private readonly client: WorkloadNetworkingClient;
  private readonly latencies: number[] = [];
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    socketPath: string,
    private readonly intervalMs = 10,
  ) {
    this.client = new WorkloadNetworkingClient(`unix:${socketPath}`, grpc.credentials.createInsecure(), {
      'grpc.use_local_subchannel_pool': 1,
    });
  }

  /** Connects first, so that the first sample does not include the connection's start. */
  async start(): Promise<void> {
    await this.status();
    this.timer = setInterval(() => this.sample(), this.intervalMs);
  }

  private status(): Promise<void> {
    return new Promise((resolve, reject) =>
      this.client.status(
        { omitFabricPeers: false },
        new grpc.Metadata(),
        { deadline: Date.now() + 5_000 },
        (err) => (err ? reject(err) : resolve()),
      ),
    );
  }

  private sample(): void {
    const t0 = performance.now();
    const p: Promise<void> = this.status().then(
      () => void this.latencies.push(performance.now() - t0),
      () => {
        this.failures++;
        this.latencies.push(performance.now() - t0);
      },
    );
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  /** Stops sampling, waits for the samples still running, and summarises them. */
  async stop(): Promise<StatusLatency> {
    clearInterval(this.timer);
    await Promise.all([...this.inFlight]);
    this.client.close();
    const sorted = [...this.latencies].sort((a, b) => a - b);
    const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
    return {
      samples: sorted.length,
      failures: this.failures,
      maxMs: sorted[sorted.length - 1] ?? 0,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
    };
  }
}

export const fmtLatency = (l: StatusLatency): string =>
  `${l.samples} Status samples, p50 ${l.p50Ms.toFixed(1)} ms, p99 ${l.p99Ms.toFixed(1)} ms, max ${l.maxMs.toFixed(1)} ms, ${l.failures} failed`;

/** Runs `load` while sampling Status every 10 ms on a connection of its own. */
export async function sampleStatusDuring<T>(
  socket: string,
  load: () => Promise<T>,
): Promise<{ result: T; latency: StatusLatency }> {
  const sampler = new StatusSampler(socket);
  await sampler.start();
  try {
    const result = await load();
    return { result, latency: await sampler.stop() };
  } catch (err) {
    await sampler.stop();
    throw err;
  }
}
