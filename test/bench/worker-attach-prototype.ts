import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { Worker, isMainThread, parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import type { AttachSpec } from '../../core/backend';
import { NetnsHandle } from '../../core/netns';
import { NetlinkSocket } from '../../backends/linux/rtnetlink/socket';
import { planAttachment, randomMac } from '../../backends/linux/attach-plan';
import { hostSideRequests } from '../../backends/linux/host-side';
import { resolveLinuxBackendOptions } from '../../backends/linux/linux-backend-options';
import {
  NLM_F_ACK,
  NLM_F_REQUEST,
  NLMSG_ERROR,
  RTM_NEWLINK,
  decodeErrorMessage,
  decodeLink,
  decodeMessages,
  encodeMessages,
  newVethRequest,
  setLinkRequest,
  type NetlinkRequest,
} from '../../backends/linux/rtnetlink';
import { delLinkGroupRequest } from '../../backends/linux/rtnetlink/link';
import { workloadSideRequests } from '../../backends/linux/workload-side';
import { benchFloor } from './floor.bench';
import { benchLinuxBackend } from './linux-backend.bench';
import { percentile } from './stats';

// PROTOTYPE, for measuring a design direction only (issue 15): one dedicated worker thread does the
// whole netlink exchange of an attach synchronously. A thread that runs only our code may setns
// freely, so it opens the workload's socket itself, and writes and reads the netlink fds with
// fs.writeSync/readSync: no threadpool hop per request, one postMessage per attach each way. The
// messages are the Linux backend's own (its request builders, unchanged), in the same writes.
// Detaches that arrive while the worker is busy are gathered, as the GroupDeleter does: their
// SETLINKs, then one group delete. No store, no gRPC, no rollback: it is not a backend.
//
//   node dist/test/bench/worker-attach-prototype.js [count] [parallel] [rounds] [workers]
//
// Each round measures the prototype (attach/detach p50 from the main thread's view, the attach's time
// inside the worker, rate at `parallel` in flight, CPU per attach of the whole process), then the
// in-process Linux backend and the floor (netlink-floor.c), so that the three share the machine's
// noise.

interface AttachJob {
  kind: 'attach';
  id: number;
  spec: Spec;
}
interface DetachJob {
  kind: 'detach';
  id: number;
  spec: Spec;
}
type Job = AttachJob | DetachJob;
interface Done {
  id: number;
  error?: string;
  /** Time spent in the worker on this job, ms. */
  workMs?: number;
}

// ---- worker side ----

/** A spec as the prototype's jobs carry it: the worker opens the namespace itself. */
type Spec = Omit<AttachSpec, 'netns'>;

function workerMain(hostNetnsPath: string): void {
  const port = parentPort;
  if (!port) throw new Error('no parent port');
  const opts = resolveLinuxBackendOptions({ hostNetnsPath });
  const hostNs = NetnsHandle.openSync(hostNetnsPath);
  const host = NetlinkSocket.openIn(hostNs).fd;
  const rbuf = Buffer.allocUnsafe(64 * 1024);
  let seq = 1;

  /** One write of `reqs` (ACK on the last), then reads until that ACK; returns the non-ACK replies. */
  const exchange = (fd: number, reqs: readonly NetlinkRequest[]) => {
    const first = seq;
    const datagram = encodeMessages(
      reqs.map((r, i) => ({
        type: r.type,
        flags: r.flags | NLM_F_REQUEST | (i === reqs.length - 1 ? NLM_F_ACK : 0),
        seq: seq++,
        pid: 0,
        payload: r.payload,
      })),
    );
    fs.writeSync(fd, datagram);
    const last = seq - 1;
    const replies = [];
    for (;;) {
      const n = fs.readSync(fd, rbuf, 0, rbuf.length, null);
      for (const m of decodeMessages(rbuf.subarray(0, n))) {
        if (m.seq < first || m.seq > last) continue;
        if (m.type === NLMSG_ERROR) {
          const ack = decodeErrorMessage(m);
          if (ack.errno !== 0 && !(ack.errno === 19 && reqs[0]?.type === 17))
            throw new Error(`netlink errno ${ack.errno} ${ack.extack.message ?? ''}`);
          if (m.seq === last) return replies;
        } else replies.push({ ...m, payload: Buffer.from(m.payload) });
      }
    }
  };

  const attach = (spec: Spec): void => {
    const plan = planAttachment(spec, opts);
    const ns = NetnsHandle.openSync(spec.netnsPath, { workload: true });
    const nsFd = ns.fd;
    const sock = NetlinkSocket.openIn(ns);
    try {
      const echoed = exchange(host, [
        newVethRequest(
          {
            name: plan.hostName,
            mtu: plan.mtu,
            group: plan.linkGroup,
            up: true,
            peer: { name: plan.ifName, mtu: plan.mtu, mac: randomMac(), netnsFd: nsFd },
          },
          { echo: true },
        ),
      ]).find((m) => m.type === RTM_NEWLINK);
      if (!echoed) throw new Error('no echo of the new link');
      const link = decodeLink(echoed);
      const peerIndex = link.linkIndex ?? 0;
      // The backend sends these two concurrently; here one after the other, on one thread.
      exchange(sock.fd, workloadSideRequests(plan, peerIndex));
      exchange(host, hostSideRequests(plan, link.index));
      exchange(host, [setLinkRequest({ index: link.index }, { alias: plan.alias })]);
    } finally {
      void sock.close();
      ns.close();
    }
  };

  const detachAll = (specs: Spec[]): void => {
    if (specs.length === 0) return;
    exchange(
      host,
      specs.map((s) =>
        setLinkRequest({ name: planAttachment(s, opts).hostName }, { group: opts.detachGroup, up: false }),
      ),
    );
    exchange(host, [delLinkGroupRequest(opts.detachGroup)]);
  };

  port.on('message', (first: Job) => {
    // Everything queued meanwhile is handled in this turn: attaches one by one, detaches together.
    const jobs: Job[] = [first];
    for (let m = receiveMessageOnPort(port as never); m; m = receiveMessageOnPort(port as never))
      jobs.push(m.message as Job);
    const done: Done[] = [];
    const detaches: DetachJob[] = [];
    for (const job of jobs) {
      if (job.kind === 'detach') {
        detaches.push(job);
        continue;
      }
      try {
        const t = process.hrtime.bigint();
        attach(job.spec);
        done.push({ id: job.id, workMs: Number(process.hrtime.bigint() - t) / 1e6 });
      } catch (err) {
        done.push({ id: job.id, error: String(err) });
      }
    }
    try {
      detachAll(detaches.map((d) => d.spec));
      done.push(...detaches.map((d) => ({ id: d.id })));
    } catch (err) {
      done.push(...detaches.map((d) => ({ id: d.id, error: String(err) })));
    }
    port.postMessage(done);
  });
}

// ---- main thread ----

/** Posts jobs round robin to `size` workers (each with its own host socket). */
class WorkerClient {
  private readonly workers: Worker[];
  private readonly waiting = new Map<number, { resolve(): void; reject(e: Error): void }>();
  private next = 1;
  /** Worker-side time of each finished attach, ms. */
  readonly workMs: number[] = [];

  constructor(hostNetnsPath: string, size: number) {
    this.workers = Array.from(
      { length: size },
      () => new Worker(__filename, { workerData: { hostNetnsPath } }),
    );
    for (const w of this.workers) this.listen(w);
  }

  private listen(worker: Worker): void {
    worker.on('message', (done: Done[]) => {
      for (const d of done) {
        if (d.workMs !== undefined) this.workMs.push(d.workMs);
        const w = this.waiting.get(d.id);
        this.waiting.delete(d.id);
        if (d.error) w?.reject(new Error(d.error));
        else w?.resolve();
      }
    });
    worker.on('error', (err) => {
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
    });
  }

  run(kind: Job['kind'], spec: Spec): Promise<void> {
    const id = this.next++;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.workers[id % this.workers.length]?.postMessage({ kind, id, spec } satisfies Job);
    });
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

function ipBatch(commands: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile('ip', ['-batch', '-'], (err, _o, stderr) =>
      err ? reject(new Error(stderr || err.message)) : resolve(),
    );
    child.stdin?.end(commands.join('\n') + '\n');
  });
}

async function phase(ops: Array<() => Promise<void>>, parallel: number) {
  const lat: number[] = [];
  let next = 0;
  const cpu = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < ops.length) {
        const op = ops[next++];
        const t = process.hrtime.bigint();
        if (op) await op();
        lat.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return {
    p50: percentile(lat, 50),
    rate: ops.length / (Number(process.hrtime.bigint() - t0) / 1e9),
    cpuMsPerOp: (used.user + used.system) / 1000 / ops.length,
  };
}

interface ProtoResult {
  attachP50: number;
  inWorkerP50: number;
  attachRate: number;
  cpuMsPerAttach: number;
  detachP50: number;
  detachRate: number;
}

async function runPrototype(count: number, parallel: number, workers: number): Promise<ProtoResult> {
  const tag = randomBytes(3).toString('hex');
  const node = `wnb-proto-${tag}-node`;
  const names = Array.from({ length: count }, (_, i) => `wnb-proto-${tag}-${i}`);
  const created: string[] = [];
  let client: WorkerClient | undefined;
  try {
    for (const batch of [[node], names]) {
      await ipBatch(batch.map((n) => `netns add ${n}`));
      created.push(...batch);
    }
    const specs: Spec[] = names.map((n, i) => ({
      key: `proto-${i}/eth0`,
      workloadId: `proto-${i}`,
      ifName: 'eth0',
      netnsPath: `/var/run/netns/${n}`,
      netnsInode: fs.statSync(`/var/run/netns/${n}`).ino,
      mtu: 1500,
      ips: [
        {
          family: 4,
          address: `10.251.${Math.floor(i / 250)}.${(i % 250) + 2}`,
          gateway: '169.254.1.1',
        },
      ],
    }));
    const c = new WorkerClient(`/var/run/netns/${node}`, workers);
    client = c;
    const attaches = specs.map((s) => () => c.run('attach', s));
    const detaches = specs.map((s) => () => c.run('detach', s));
    // Warm-up, as for every row: the worker's JIT.
    await phase(attaches, parallel);
    await phase(detaches, parallel);
    c.workMs.length = 0;
    const aSeq = await phase(attaches, 1);
    const inWorkerP50 = percentile(c.workMs, 50);
    const dSeq = await phase(detaches, 1);
    const aPar = await phase(attaches, parallel);
    const dPar = await phase(detaches, parallel);
    return {
      attachP50: aSeq.p50,
      inWorkerP50,
      attachRate: aPar.rate,
      cpuMsPerAttach: aPar.cpuMsPerOp,
      detachP50: dSeq.p50,
      detachRate: dPar.rate,
    };
  } finally {
    await client?.stop();
    if (created.length > 0) await ipBatch(created.reverse().map((n) => `netns delete ${n}`)).catch(() => {});
  }
}

/** Rounds of prototype, in-process backend and floor, interleaved so that the machine's noise hits all three. */
async function main(count: number, parallel: number, rounds: number, workers: number): Promise<void> {
  const line = (cells: Array<string | number>): string =>
    cells
      .map((c, i) =>
        (typeof c === 'number' ? c.toFixed(c < 10 ? 3 : 0) : c)
          .padStart(i === 0 ? 0 : 9)
          .padEnd(i === 0 ? 30 : 0),
      )
      .join(' ');
  console.log(
    `count ${count}, ${parallel} in flight, ${os.cpus().length} CPUs, ${rounds} round(s), ${workers} worker thread(s)`,
  );
  console.log(line(['', 'att p50', 'in worker', 'att/s', 'CPU ms/a', 'det p50', 'det/s']));
  for (let round = 1; round <= rounds; round++) {
    const p = await runPrototype(count, parallel, workers);
    const b = await benchLinuxBackend({ count, parallel });
    const f = (await benchFloor({ count, parallel })).rows;
    const ba = b.find((r) => r.name === 'linux-backend attach');
    const bd = b.find((r) => r.name === 'linux-backend detach');
    const fa = f.find((r) => r.op === 'attach');
    const fd = f.find((r) => r.op === 'detach');
    if (!ba || !bd || !fa || !fd) throw new Error('missing rows');
    console.log(`round ${round}, load ${os.loadavg()[0]?.toFixed(1)}`);
    console.log(
      line([
        '  worker-thread prototype',
        p.attachP50,
        p.inWorkerP50,
        p.attachRate,
        p.cpuMsPerAttach,
        p.detachP50,
        p.detachRate,
      ]),
    );
    console.log(
      line([
        '  linux backend (in process)',
        ba.p50Ms,
        '',
        ba.perSecondAtParallel,
        ba.cpuMsPerOp,
        bd.p50Ms,
        bd.perSecondAtParallel,
      ]),
    );
    console.log(
      line([
        '  floor (C)',
        fa.p50Ms,
        '',
        fa.perSecondAtParallel,
        fa.cpuMsPerOp,
        fd.p50Ms,
        fd.perSecondAtParallel,
      ]),
    );
  }
}

if (!isMainThread) {
  workerMain((workerData as { hostNetnsPath: string }).hostNetnsPath);
} else if (require.main === module) {
  main(
    Number(process.argv[2] ?? 100),
    Number(process.argv[3] ?? 16),
    Number(process.argv[4] ?? 3),
    Number(process.argv[5] ?? 1),
  ).catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
