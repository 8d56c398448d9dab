import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { ApiClient } from '../../cli/api-client';
import { attachmentJson } from '../../cli/inspect-format';
import { streamAttachments } from '../../cli/ls-command';
import { json } from '../../cli/output';
import { LIST_STREAM_PAGE } from '../../core/serve/api-server';
import {
  WorkloadNetworkingService,
  type Attachment,
  type ListRequest,
  type ListResponse,
} from '../../proto/gen/workloadnet/v1/workload';
import { SimProcess } from '../support/sim-process';
import { attachRequest } from '../support/attach-request';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { useNodeFixture } from '../support/node-fixture';
import { waitUntil } from '../support/wait-until';

// `workloadnet ls` against the real daemon (DPU backend, a simulated DPU without dataplane) holding
// several ListStream pages of attachments: every row, in List's order, as the one-message List printed
// them; and against stand-ins for what a real daemon cannot be made to do on cue: one older than
// ListStream, one that stops half-way, one that holds the rest of the table back.

/** More than three of the daemon's pages, the last one not full. */
const COUNT = LIST_STREAM_PAGE * 3 + 5;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The real CLI; `onStdout` sees the output as it grows, before the process exits. */
function cli(args: string[], onStdout: (soFar: string) => void = () => undefined): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => onStdout((stdout += d)));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The first column of a table's rows, header left out. */
const firstColumn = (table: string): string[] =>
  table
    .trimEnd()
    .split('\n')
    .slice(1)
    .map((l) => l.split(/\s+/)[0] ?? '');

/**
 * A gRPC server on a unix socket that answers the workload API's List and ListStream as the test says
 * (methods it leaves out answer UNIMPLEMENTED, as on a daemon that predates them).
 */
class StandInDaemon {
  private constructor(
    private readonly server: grpc.Server,
    readonly socket: string,
  ) {}

  static async start(
    dir: string,
    impl: {
      list?: grpc.handleUnaryCall<ListRequest, ListResponse>;
      listStream?: grpc.handleServerStreamingCall<ListRequest, Attachment>;
    },
  ): Promise<StandInDaemon> {
    const socket = path.join(dir, `stand-in-${Math.random().toString(36).slice(2)}.sock`);
    const server = new grpc.Server();
    server.addService(WorkloadNetworkingService, impl);
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
    return new StandInDaemon(server, socket);
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.tryShutdown(() => resolve()));
  }
}

describeRoot('workloadnet ls: streamed from the daemon (DPU backend, simulated DPU)', function () {
  this.timeout(180_000);
  const fx = useNodeFixture({ prefix: 'wn-ls-', shape: 'bare' });
  let d: DaemonProcess;
  let sim: SimProcess;
  /** What List answers: the rows and their order every ls must print. */
  let listed: Attachment[];
  const stopLater: StandInDaemon[] = [];

  before(async () => {
    const agentSocket = path.join(fx.dir, 'agent.sock');
    const workload = fx.namespaces.add().path;
    d = await fx.startDaemon({
      flags: {
        backend: 'dpu',
        'agent-socket': agentSocket,
        'pod-cidr': '10.253.0.0/20',
        'log-level': 'warn',
      },
    });
    sim = SimProcess.start({
      socket: agentSocket,
      agentId: 'ls-dpu',
      stateFile: path.join(fx.dir, 'sim.json'),
      extra: ['--dataplane', 'none', '--log-level', 'warn'],
    });
    await waitUntil(async () => (await d.client.status()).ready, 'the daemon ready with its DPU', 30_000);
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < COUNT) {
          const i = next++;
          const pod = { uid: `u${i}`, namespace: 'ls', name: `pod-${i}` };
          await d.client.call(d.client.raw.attach, attachRequest(`ls-${i}`, workload, 'eth0', { pod }));
        }
      }),
    );
    listed = (await d.client.call(d.client.raw.list, {})).attachments;
  });
  after(async () => {
    await Promise.all(stopLater.map((s) => s.stop()));
    await sim?.stop();
  });

  const sock = (s: string = d.socket): string[] => ['--socket', s];

  it('--json prints every attachment in List’s order, byte for byte what the one-message List printed', async () => {
    expect(listed).to.have.length(COUNT);
    const r = await cli(['ls', '--json', ...sock()]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.equal('');
    const rows = JSON.parse(r.stdout) as Array<{ workloadId: string }>;
    expect(rows.map((a) => a.workloadId)).to.deep.equal(listed.map((a) => a.workloadId));
    // The JSON of the whole array at once, as `ls --json` wrote it before it streamed.
    expect(r.stdout).to.equal(json(listed.map(attachmentJson)));
  });

  it('prints a table of every attachment in List’s order, the header once', async () => {
    const r = await cli(['ls', ...sock()]);
    expect(r.code, r.stderr).to.equal(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).to.match(/^WORKLOAD\s+POD\s+INTERFACE\s+NETWORK\s+IPS\s+BACKEND\s+STATE\s+AGE$/);
    expect(lines.filter((l) => l.startsWith('WORKLOAD'))).to.have.length(1);
    expect(firstColumn(r.stdout)).to.deep.equal(listed.map((a) => a.workloadId));
    expect(lines[1]).to.match(
      /^ls-\d+\s+ls\/pod-\d+\s+eth0\s+default\s+10\.253\.\d+\.\d+\/32\s+dpu\s+\S+\s+\d+[smhd]$/,
    );
  });

  it('falls back to List against a daemon without ListStream, says so, and prints the same', async () => {
    // An older daemon: List served (by the real daemon's answer), ListStream unknown.
    const old = await StandInDaemon.start(fx.dir, {
      list: (_call, cb) => void d.client.call(d.client.raw.list, {}).then((res) => cb(null, res), cb),
    });
    stopLater.push(old);
    const r = await cli(['ls', '--json', ...sock(old.socket)]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.include('the daemon has no ListStream').and.include('listing with List');
    expect(r.stdout).to.equal(json(listed.map(attachmentJson)));
    const t = await cli(['ls', ...sock(old.socket)]);
    expect(t.code, t.stderr).to.equal(0);
    expect(firstColumn(t.stdout)).to.deep.equal(listed.map((a) => a.workloadId));
  });

  it('prints rows as they arrive, before the daemon has sent the rest', async () => {
    const first = listed.slice(0, 3);
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const slow = await StandInDaemon.start(fx.dir, {
      listStream: (call) => {
        for (const a of first) call.write(a);
        void held.then(() => {
          for (const a of listed.slice(first.length)) call.write(a);
          call.end();
        });
      },
    });
    stopLater.push(slow);
    let printed = '';
    const run = cli(['ls', '--json', ...sock(slow.socket)], (soFar) => (printed = soFar));
    // The rest of the table is held back until the first rows are on the CLI's stdout.
    await waitUntil(
      () => first.every((a) => printed.includes(`"workloadId": "${a.workloadId}"`)),
      'the first rows printed while the rest is held back',
      30_000,
    );
    expect(printed).to.not.include(`"workloadId": "${listed[first.length]?.workloadId}"`);
    release();
    const r = await run;
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.equal(json(listed.map(attachmentJson)));
  });

  it('takes no row while the output is full, and the rest once it has drained', async () => {
    const stream = await StandInDaemon.start(fx.dir, {
      listStream: (call) => {
        for (const a of listed) call.write(a);
        call.end();
      },
    });
    stopLater.push(stream);
    const client = new ApiClient(stream.socket);
    try {
      const got: string[] = [];
      let full = true;
      let drain: () => void = () => undefined;
      const drained = new Promise<void>((resolve) => (drain = resolve));
      const done = streamAttachments(
        client,
        (a) => {
          expect(full && got.length > 0, 'a row taken while the output is full').to.equal(false);
          got.push(a.workloadId);
          return !full;
        },
        () => drained,
        30_000,
      );
      await waitUntil(() => got.length === 1, 'the first row');
      // Every other row is on its way or buffered; none may reach the full output, however long.
      await new Promise((r) => setTimeout(r, 500));
      expect(got).to.have.length(1);
      full = false;
      drain();
      expect(await done).to.equal('done');
      expect(got).to.deep.equal(listed.map((a) => a.workloadId));
    } finally {
      client.close();
    }
  });

  it('fails with the daemon’s error when the stream breaks half-way, without falling back or closing the JSON', async () => {
    const breaking = await StandInDaemon.start(fx.dir, {
      listStream: (call) => {
        for (const a of listed.slice(0, 2)) call.write(a);
        // UNIMPLEMENTED after rows is not an old daemon: the rows so far must not be listed twice.
        call.emit('error', { code: grpc.status.UNIMPLEMENTED, details: 'gone half-way' });
      },
      list: (_call, cb) => cb(null, { attachments: listed }),
    });
    stopLater.push(breaking);
    const r = await cli(['ls', '--json', ...sock(breaking.socket)]);
    expect(r.code).to.equal(1);
    expect(r.stderr).to.include('UNIMPLEMENTED: gone half-way');
    expect(r.stderr).to.not.include('listing with List');
    expect(r.stdout.match(/"workloadId"/g) ?? []).to.have.length(2);
    expect(() => JSON.parse(r.stdout) as unknown).to.throw();
  });

  it('gives up on a daemon that stops sending, after --timeout of silence', async () => {
    const mute = await StandInDaemon.start(fx.dir, {
      listStream: (call) => {
        for (const a of listed.slice(0, 1)) call.write(a);
      },
    });
    stopLater.push(mute);
    const r = await cli(['ls', '--timeout', '1', ...sock(mute.socket)]);
    expect(r.code).to.equal(1);
    expect(r.stderr).to.include('DEADLINE_EXCEEDED: the daemon sent nothing for 1 s');
  });

  it('stops quietly when its reader goes away (ls | head)', async () => {
    // JSON: far more than a pipe holds, so the CLI is still writing when the pipe closes.
    const child = spawn(process.execPath, [CLI, 'ls', '--json', ...sock()], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    // Like head(1): read the first chunk, then close the pipe.
    child.stdout.once('data', () => child.stdout.destroy());
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(stderr).to.equal('');
    expect(code).to.equal(0);
  });
});
