import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { ApiClient } from '../../cli/api-client';
import { MAX_MESSAGE_BYTES } from '../../core/serve/api-server';
import { AttachRequest, GCRequest } from '../../proto/gen/workloadnet/v1/workload';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { InProcessDaemon } from '../support/in-process-daemon';
import { NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { RecordingBackend } from '../support/recording-backend';
import { codeName, outcome } from '../support/grpc-outcome';
import { makeFifo, makeNetnsPathZoo, type NetnsPathZoo } from './netns-path-zoo';
import { makeNodeNamespace } from './node-namespace';
import { checkProperty } from './property-check';
import { scaled, TORTURE_SEED } from './torture-settings';
import { fuzzTally } from './fuzz-tally';

// Property tests on the workload API with the recording backend: whatever a caller sends, the daemon
// answers (it never crashes or hangs), refuses bad input with INVALID_ARGUMENT and a message, accepts
// exactly the valid input, and a refused call changes nothing: the same attachments, the same pool
// usage, no call to the backend.
//
// The oracle below restates the documented input rules (README "The workload API", core/attach/validation.ts
// comments) independently of the daemon's code.

const RUNS = {
  attach: scaled(1500),
  detach: scaled(1000),
  lookups: scaled(1000),
  gc: scaled(500),
  rawBytes: scaled(1000),
};

const oracle = {
  workloadId: (s: string): boolean =>
    s.length > 0 && s.length <= 256 && /^[A-Za-z0-9][A-Za-z0-9_.:-]*$/.test(s),
  /** Empty means the default (eth0) where a name is optional. */
  ifName: (s: string): boolean =>
    s === '' || (Buffer.byteLength(s) <= 15 && !/[/:\s\0]/.test(s) && s !== '.' && s !== '..'),
  mtu: (n: number): boolean => n === 0 || (n >= 68 && n <= 65535),
  metadata: (s: string): boolean => s.length <= 1024 && !s.includes('\0'),
};

const huge = (n: number): fc.Arbitrary<string> =>
  fc.constantFrom('x', 'é', '\u{1F600}', '/', '\0', ' ').map((c) => c.repeat(n));

const arb = {
  workloadId: fc.oneof(
    { weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,40}$/) },
    { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
    { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 300 }) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '',
        '.',
        '..',
        '-lead',
        '_lead',
        'a/b',
        'a b',
        'a\tb',
        'a\0b',
        '\0',
        'x'.repeat(256),
        'x'.repeat(257),
        'ü',
        'a\nb',
        'constructor',
        '__proto__',
        'a;rm -rf /',
      ),
    },
    { weight: 1, arbitrary: fc.integer({ min: 255, max: 150_000 }).chain((n) => huge(n)) },
  ),
  ifName: fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom('', 'eth0', 'net1') },
    { weight: 3, arbitrary: fc.stringMatching(/^[a-z][a-z0-9]{0,16}$/) },
    { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '.',
        '..',
        'eth0/',
        'a:b',
        'a b',
        '\u00a0',
        '\0',
        'x'.repeat(15),
        'x'.repeat(16),
        'é'.repeat(7),
        'é'.repeat(8),
        '\u{1F600}'.repeat(4),
      ),
    },
  ),
  mtu: fc.oneof(
    fc.constant(0),
    fc.integer({ min: 68, max: 65535 }),
    fc.constantFrom(1, 67, 68, 65535, 65536, 0xffffffff),
    fc.integer({ min: 0, max: 0xffffffff }),
  ),
  metadata: fc.oneof(
    { weight: 4, arbitrary: fc.constant('') },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
    { weight: 1, arbitrary: fc.integer({ min: 1000, max: 1100 }).chain(huge) },
  ),
};

describeRoot('fuzz: workload API input (recording backend, root for test-owned namespaces)', function () {
  this.timeout(180_000);
  const namespaces = new NetnsSet('wnr-');
  const backend = new RecordingBackend();
  const residents = ['resident-a', 'resident-b'];
  const { tried, count, params } = fuzzTally();
  let zoo: NetnsPathZoo;
  let d: InProcessDaemon;
  let client: ApiClient;

  before(async () => {
    zoo = await makeNetnsPathZoo(namespaces);
    d = await InProcessDaemon.start(backend);
    client = d.client;
    // Attachments that no refused call may touch.
    for (const id of residents)
      await client.call(client.raw.attach, request(id, zoo.valid[0] ?? '', 'eth0', 0));
  });

  after(async () => {
    await d?.dispose();
    zoo?.cleanup();
    namespaces.cleanup();
    console.log(
      `      fuzz-api (fast-check seed ${TORTURE_SEED}): inputs tried per property ${JSON.stringify(tried)}, total ${Object.entries(
        tried,
      )
        .filter(([k]) => !k.includes('('))
        .reduce((a, [, n]) => a + n, 0)}`,
    );
  });

  function request(
    workloadId: string,
    netnsPath: string,
    ifName: string,
    mtu: number,
    containerId = '',
    podName = '',
  ): AttachRequest {
    return {
      workloadId,
      netns: { netnsPath, ifName, mtu },
      containerId,
      pod: podName ? { uid: '', namespace: '', name: podName } : undefined,
      network: '',
      dns: undefined,
      dpu: '',
    };
  }

  /** What must never change because of a refused call. */
  async function snapshot(): Promise<string> {
    const st = await d.daemon.service.status();
    const list = [...(await d.daemon.service.list())];
    return JSON.stringify({
      keys: list.map((a) => a.key).sort(),
      ips: list.map((a) => a.ips.map((i) => i.address)).sort(),
      used: st.pools.map((p) => p.used),
      programmed: [...backend.programmed.keys()].sort(),
    });
  }

  it(`answers Attach with INVALID_ARGUMENT for every invalid input and changes nothing, OK only for valid input (${RUNS.attach} runs)`, async () => {
    const paths = fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...zoo.valid, ...zoo.invalid) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 60 }) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 60 }).map((s) => `/proc/self/ns/${s}`) },
      { weight: 1, arbitrary: fc.integer({ min: 4000, max: 150_000 }).chain(huge) },
    );
    const good = {
      id: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,40}$/),
      netnsPath: fc.constantFrom(...zoo.valid),
      ifName: fc.oneof(fc.constantFrom('', 'eth0'), fc.stringMatching(/^[a-z][a-z0-9]{0,14}$/)),
      mtu: fc.oneof(fc.constant(0), fc.integer({ min: 68, max: 65535 })),
      meta: fc.oneof(fc.constant(''), fc.stringMatching(/^[a-z0-9-]{1,30}$/)),
    };
    const anyField = {
      id: arb.workloadId,
      netnsPath: paths,
      ifName: arb.ifName,
      mtu: arb.mtu,
      meta: arb.metadata,
    };
    type Field = keyof typeof good;
    // Valid calls, calls with exactly one field drawn from anything, and calls with every field so.
    const call = fc.oneof(
      { weight: 1, arbitrary: fc.record(good) },
      {
        weight: 2,
        arbitrary: fc
          .constantFrom<Field>('id', 'netnsPath', 'ifName', 'mtu', 'meta')
          .chain((broken) => fc.record({ ...good, [broken]: anyField[broken] })),
      },
      { weight: 2, arbitrary: fc.record(anyField) },
    );
    const before = await snapshot();
    await checkProperty(
      fc.asyncProperty(call, fc.boolean(), async (c, metaAsPod) => {
        const { id, netnsPath, ifName, mtu, meta } = c as {
          id: string;
          netnsPath: string;
          ifName: string;
          mtu: number;
          meta: string;
        };
        count('attach');
        fc.pre(!residents.includes(id));
        const valid =
          oracle.workloadId(id) &&
          oracle.ifName(ifName) &&
          oracle.mtu(mtu) &&
          oracle.metadata(meta) &&
          zoo.valid.includes(netnsPath);
        const calls = backend.calls.length;
        const req = request(id, netnsPath, ifName, mtu, metaAsPod ? '' : meta, metaAsPod ? meta : '');
        const r = await outcome(client.call(client.raw.attach, req));
        if (AttachRequest.encode(req).finish().length > MAX_MESSAGE_BYTES) {
          count('attach (over 1 MiB)');
          expect(codeName(r.code), r.details).to.equal('RESOURCE_EXHAUSTED');
        } else if (valid) {
          count('attach (valid, accepted)');
          expect(codeName(r.code), r.details).to.equal('OK');
          expect(r.value?.ip).to.have.length(1);
          expect(r.value?.interfaces[0]?.mtu).to.equal(mtu || 1500);
          expect(backend.calls.slice(calls)).to.deep.equal([
            { op: 'attach', key: `${id}/${ifName || 'eth0'}` },
          ]);
          await client.call(client.raw.detach, { workloadId: id, netns: { netnsPath, ifName, mtu: 0 } });
        } else {
          expect(codeName(r.code), `accepted or mis-coded: ${r.details}`).to.equal('INVALID_ARGUMENT');
          expect(r.details, 'a message a person can act on').to.match(/\w{3,}/);
          expect(backend.calls.length, 'the backend saw the refused call').to.equal(calls);
        }
        expect(await snapshot()).to.equal(before);
      }),
      params(RUNS.attach),
    );
  });

  it(`answers Detach of anything with OK or INVALID_ARGUMENT and never touches other workloads (${RUNS.detach} runs)`, async () => {
    const before = await snapshot();
    await checkProperty(
      fc.asyncProperty(
        arb.workloadId,
        arb.ifName,
        fc.oneof(fc.constantFrom(...zoo.valid, ...zoo.invalid), fc.string({ unit: 'binary' })),
        async (id, ifName, netnsPath) => {
          count('detach');
          fc.pre(!residents.includes(id));
          const r = await outcome(
            client.call(client.raw.detach, { workloadId: id, netns: { netnsPath, ifName, mtu: 0 } }),
          );
          const expected = oracle.workloadId(id) && oracle.ifName(ifName) ? 'OK' : 'INVALID_ARGUMENT';
          expect(codeName(r.code), r.details.slice(0, 200)).to.equal(expected);
          expect(await snapshot()).to.equal(before);
        },
      ),
      params(RUNS.detach),
    );
  });

  it(`answers Get and Check of unknown or invalid keys with NOT_FOUND or INVALID_ARGUMENT (${RUNS.lookups} runs)`, async () => {
    const before = await snapshot();
    await checkProperty(
      fc.asyncProperty(arb.workloadId, arb.ifName, fc.boolean(), async (id, ifName, useCheck) => {
        count(useCheck ? 'check' : 'get');
        fc.pre(!residents.includes(id));
        const r = useCheck
          ? await outcome(client.call(client.raw.check, { workloadId: id, ifName }))
          : await outcome(client.call(client.raw.get, { workloadId: id, ifName }));
        const expected = oracle.workloadId(id) && oracle.ifName(ifName) ? 'NOT_FOUND' : 'INVALID_ARGUMENT';
        expect(codeName(r.code), r.details).to.equal(expected);
        expect(await snapshot()).to.equal(before);
      }),
      params(RUNS.lookups),
    );
  });

  it(`refuses a GC whose keep list holds an invalid entry without removing anything (${RUNS.gc} runs)`, async () => {
    const before = await snapshot();
    const entry = fc.record({ workloadId: arb.workloadId, ifName: arb.ifName });
    await checkProperty(
      fc.asyncProperty(fc.array(entry, { maxLength: 5 }), async (extra) => {
        count('gc');
        // The residents are always named, so a valid GC keeps everything too.
        const keep = [...residents.map((workloadId) => ({ workloadId, ifName: 'eth0' })), ...extra];
        const r = await outcome(client.call(client.raw.gc, { keep, namespacesGone: false, dryRun: false }));
        const valid = extra.every((k) => oracle.workloadId(k.workloadId) && oracle.ifName(k.ifName));
        const tooBig =
          GCRequest.encode({ keep, namespacesGone: false, dryRun: false }).finish().length >
          MAX_MESSAGE_BYTES;
        expect(codeName(r.code), r.details).to.equal(
          tooBig ? 'RESOURCE_EXHAUSTED' : valid ? 'OK' : 'INVALID_ARGUMENT',
        );
        if (valid) expect(r.value?.removed).to.deep.equal([]);
        expect(await snapshot()).to.equal(before);
      }),
      params(RUNS.gc),
    );
  });

  it(`survives arbitrary bytes as an Attach request and changes nothing (${RUNS.rawBytes} runs)`, async () => {
    const raw = new grpc.Client(`unix:${d.config.socket}`, grpc.credentials.createInsecure());
    const send = (bytes: Uint8Array): Promise<{ code: grpc.status; details: string }> =>
      new Promise((resolve) =>
        raw.makeUnaryRequest(
          '/workloadnet.v1.WorkloadNetworking/Attach',
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.from(bytes),
          new grpc.Metadata(),
          { deadline: Date.now() + 5000 },
          (err) =>
            resolve(err ? { code: err.code, details: err.details } : { code: grpc.status.OK, details: '' }),
        ),
      );
    const before = await snapshot();
    const calls = backend.calls.length;
    try {
      await checkProperty(
        fc.asyncProperty(fc.uint8Array({ maxLength: 300 }), async (bytes) => {
          count('rawBytes');
          const r = await send(bytes);
          // Undecodable bytes are refused by the gRPC layer itself (INTERNAL, "deserializing"); bytes
          // that decode into a request are judged like any request, and none of them is valid.
          const ok =
            r.code === grpc.status.INVALID_ARGUMENT ||
            (r.code === grpc.status.INTERNAL && /deserializ/i.test(r.details));
          expect(ok, `${codeName(r.code)} ${r.details}`).to.equal(true);
          expect(await snapshot()).to.equal(before);
        }),
        params(RUNS.rawBytes),
      );
    } finally {
      raw.close();
    }
    expect(backend.calls.length).to.equal(calls);
    expect((await client.status()).ready, 'still serving').to.equal(true);
  });
});

describeRoot('fuzz: a FIFO as the namespace path (real daemon, root)', function () {
  this.timeout(60_000);
  const namespaces = new NetnsSet('wnr-');
  let dir: string;
  let daemon: DaemonProcess | undefined;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnr-fifo-'));
    daemon = await DaemonProcess.start({
      dir,
      netns: makeNodeNamespace(namespaces),
      flags: { 'pod-cidr': '10.248.0.0/24' },
    });
  });

  after(async () => {
    // SIGKILL: a daemon with a thread stuck in open() cannot finish a graceful exit.
    await daemon?.kill('SIGKILL').catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a FIFO netns path at once, and 20 of them neither wedge the daemon nor its shutdown', async () => {
    if (!daemon) throw new Error('no daemon');
    const fifo = makeFifo(dir);
    const quick = new ApiClient(daemon.socket, 3_000);
    try {
      const started = Date.now();
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          outcome(quick.call(quick.raw.attach, attachRequest(`fifo-${i}`, fifo))),
        ),
      );
      const codes: Record<string, number> = {};
      for (const r of results) codes[codeName(r.code)] = (codes[codeName(r.code)] ?? 0) + 1;
      expect(codes, results[0]?.details).to.deep.equal({ INVALID_ARGUMENT: 20 });
      expect(Date.now() - started, 'ms to refuse 20 FIFO paths').to.be.lessThan(2_000);
      // The threadpool still works: a real attach goes through.
      const ok = namespaces.add();
      const r = await outcome(quick.call(quick.raw.attach, attachRequest('after-fifo', ok.path)));
      expect(codeName(r.code), r.details).to.equal('OK');
    } finally {
      quick.close();
    }
    // And the daemon can still stop on SIGTERM.
    const exited = new Promise<boolean>((resolve) => {
      daemon?.child.once('exit', () => resolve(true));
      setTimeout(() => resolve(false), 10_000);
    });
    daemon.child.kill('SIGTERM');
    expect(await exited, 'daemon exits within 10 s of SIGTERM').to.equal(true);
  });
});
