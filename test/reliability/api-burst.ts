import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { WorkloadNetworkingClient } from '../../proto/gen/workloadnet/v1/workload';

// A load generator in a process of its own, so that the clients' work (encoding a thousand requests
// in one go) does not run on the event loop of a daemon that a test hosts in-process.
//
//   node api-burst.js SOCKET attach|detach COUNT ID_PREFIX NETNS_PATH IF_NAME CHANNELS
//
// Fires COUNT concurrent calls for workloads ID_PREFIX0.. over CHANNELS separate connections (round
// robin), and prints one JSON object: { ms, outcomes: [{ code, details, address }] } in call order.
// IF_NAME "-" sends an empty interface name (Detach then means every interface of the workload).
// NETNS_PATH "@FILE" reads one path per line from FILE: call i uses line i (modulo their number).

export interface BurstOutcome {
  code: grpc.status;
  details: string;
  address: string;
}

export interface BurstReport {
  ms: number;
  outcomes: BurstOutcome[];
}

export const API_BURST_MAIN = __filename;

export interface BurstSpec {
  socket: string;
  op: 'attach' | 'detach';
  count: number;
  prefix: string;
  /** A namespace path, or "@FILE" with one path per line. */
  netnsPath: string;
  /** Empty: Detach by workload id alone. */
  ifName: string;
  channels: number;
}

/** Runs one burst from a separate client process (this file's main) and returns its report. */
export function runBurst(s: BurstSpec): Promise<BurstReport> {
  const args = [
    API_BURST_MAIN,
    s.socket,
    s.op,
    String(s.count),
    s.prefix,
    s.netnsPath || '',
    s.ifName || '-',
    String(s.channels),
  ];
  return new Promise((resolve, reject) =>
    execFile(process.execPath, args, { maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) =>
      err
        ? reject(new Error(`api-burst failed: ${err.message}\n${stderr}`))
        : resolve(JSON.parse(stdout) as BurstReport),
    ),
  );
}

type Callback<Res> = (err: grpc.ServiceError | null, res?: Res) => void;

function call<Res>(
  fn: (md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback<Res>) => unknown,
): Promise<Res> {
  return new Promise((resolve, reject) =>
    fn(new grpc.Metadata(), { deadline: Date.now() + 60_000 }, (err, res) =>
      err ? reject(err) : resolve(res as Res),
    ),
  );
}

async function main(): Promise<void> {
  const [socket, op, countText, prefix, netnsPath, ifArg, channelsText] = process.argv.slice(2);
  if (
    !socket ||
    (op !== 'attach' && op !== 'detach') ||
    !countText ||
    !prefix ||
    netnsPath === undefined ||
    !ifArg ||
    !channelsText
  ) {
    throw new Error('usage: api-burst SOCKET attach|detach COUNT ID_PREFIX NETNS_PATH IF_NAME CHANNELS');
  }
  const ifName = ifArg === '-' ? '' : ifArg;
  const paths = netnsPath.startsWith('@')
    ? fs.readFileSync(netnsPath.slice(1), 'utf8').split('\n').filter(Boolean)
    : [netnsPath];
  // A local subchannel pool per client: otherwise grpc-js would share one connection among them.
  const clients = Array.from(
    { length: Number(channelsText) },
    () =>
      new WorkloadNetworkingClient(`unix:${socket}`, grpc.credentials.createInsecure(), {
        'grpc.use_local_subchannel_pool': 1,
      }),
  );
  // Connect first, so the burst measures calls rather than the connections' start.
  await Promise.all(clients.map((c) => call((md, o, cb) => c.status({ omitFabricPeers: false }, md, o, cb))));
  const t0 = performance.now();
  const outcomes = await Promise.all(
    Array.from({ length: Number(countText) }, async (_, i): Promise<BurstOutcome> => {
      const c = clients[i % clients.length] as WorkloadNetworkingClient;
      const workloadId = `${prefix}${i}`;
      const netns = { netnsPath: paths[i % paths.length] ?? '', ifName, mtu: 0 };
      try {
        if (op === 'attach') {
          const r = await call<{ ips: Array<{ cidr: string }> }>((md, o, cb) =>
            c.attach(
              { workloadId, netns, containerId: '', pod: undefined, dns: undefined, network: '', dpu: '' },
              md,
              o,
              cb,
            ),
          );
          return { code: grpc.status.OK, details: '', address: (r.ips[0]?.cidr ?? '').split('/')[0] ?? '' };
        }
        await call((md, o, cb) => c.detach({ workloadId, netns }, md, o, cb));
        return { code: grpc.status.OK, details: '', address: '' };
      } catch (err) {
        const e = err as grpc.ServiceError;
        return { code: e.code, details: e.details, address: '' };
      }
    }),
  );
  const report: BurstReport = { ms: performance.now() - t0, outcomes };
  process.stdout.write(JSON.stringify(report));
  for (const c of clients) c.close();
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`api-burst: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
