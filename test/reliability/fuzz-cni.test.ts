import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import fc from 'fast-check';
import { CniServer } from '../../adapters/cni/cni-server';
import { SUPPORTED_CNI_VERSIONS } from '../../adapters/cni/cni-version';
import { buildShim, runShim } from '../support/cni-harness';
import { InProcessDaemon } from '../support/in-process-daemon';
import { NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { RecordingBackend } from '../support/recording-backend';
import { cniEnvelope, parseCniError, postCni, rawExchange, type CniAnswer } from '../support/cni-http';
import { makeNetnsPathZoo, type NetnsPathZoo } from './netns-path-zoo';
import { checkProperty } from './property-check';
import { scaled, TORTURE_SEED } from './torture-settings';
import { fuzzTally } from './fuzz-tally';

// Property tests on the daemon's CNI endpoint (the real CniServer on the real orchestrator, recording
// backend): whatever arrives — malformed, huge or deeply nested JSON, wrong types, path tricks in
// CNI_NETNS, HTTP the forwarder would never send — the answer is CNI error JSON with a code the spec
// defines for that kind of mistake, the daemon keeps serving, and nothing is stored unless the call
// was a valid ADD.

const RUNS = {
  body: scaled(600),
  envelope: scaled(400),
  calls: scaled(1500),
  nested: scaled(60),
  http: scaled(150),
};
/**
 * Codes a malformed call may get: 1 version, 3 unknown container (CHECK), 4 environment, 6 decoding,
 * 7 config. Never 999: that is the adapter's "unexpected failure", i.e. a bug. (999 on an unknown HTTP
 * path or method is by design: no CNI verb was reached.)
 */
const INPUT_ERROR_CODES = [1, 3, 4, 6, 7];

const containerIdOk = (s: string): boolean => s.length <= 256 && /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(s);
const ifNameOk = (s: string): boolean =>
  s !== '' && Buffer.byteLength(s) <= 15 && !/[/:\s\0]/.test(s) && s !== '.' && s !== '..';

const huge = (min: number, max: number): fc.Arbitrary<string> =>
  fc
    .tuple(fc.constantFrom('x', '\u{1F600}', '"', '\\', '{'), fc.integer({ min, max }))
    .map(([c, n]) => c.repeat(n));

/** JSON text nested `depth` levels deep, built as text: JSON.stringify itself would overflow. */
const deepJson = fc
  .tuple(fc.integer({ min: 2_000, max: 300_000 }), fc.boolean())
  .map(([depth, arrays]) =>
    arrays ? `${'['.repeat(depth)}1${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`,
  );

describeRoot('fuzz: CNI endpoint input (recording backend, root for test-owned namespaces)', function () {
  this.timeout(180_000);
  const namespaces = new NetnsSet('wnr-');
  const backend = new RecordingBackend();
  const { tried, count, params } = fuzzTally();
  const codesSeen: Record<string, number> = {};
  let zoo: NetnsPathZoo;
  let d: InProcessDaemon;
  let server: CniServer;
  let socketPath: string;

  before(async () => {
    zoo = await makeNetnsPathZoo(namespaces);
    d = await InProcessDaemon.start(backend);
    socketPath = path.join(d.dir, 'cni.sock');
    server = new CniServer(d.daemon.service, { socketPath });
    await server.listen();
    // An attachment made over gRPC: no CNI call (GC included) may touch it.
    await d.daemon.service.attach({ workloadId: 'resident', netnsPath: zoo.valid[0] ?? '', ifName: 'eth0' });
  });

  after(async () => {
    await server?.close();
    await d?.dispose();
    zoo?.cleanup();
    namespaces.cleanup();
    console.log(
      `      fuzz-cni (fast-check seed ${TORTURE_SEED}): inputs tried per property ${JSON.stringify(tried)}; CNI codes answered ${JSON.stringify(codesSeen)}`,
    );
  });

  async function stored(): Promise<string> {
    const list = [...(await d.daemon.service.list())];
    const st = await d.daemon.service.status();
    return JSON.stringify({
      keys: list.map((a) => a.key).sort(),
      used: st.pools.map((p) => p.used),
      programmed: [...backend.programmed.keys()].sort(),
    });
  }

  /** A refusal: HTTP 200, exit status 1, CNI error JSON with one of `codes`. */
  function expectRefusal(a: CniAnswer, codes: number[], what: string, tally = true): number {
    expect(a.status, `${what}: HTTP status`).to.equal(200);
    expect(a.exitCode, `${what}: exit code header (${a.body.slice(0, 200)})`).to.equal('1');
    const err = parseCniError(a.body);
    if (tally) codesSeen[err.code] = (codesSeen[err.code] ?? 0) + 1;
    expect(codes, `${what}: CNI code ${err.code} (${err.msg.slice(0, 300)})`).to.include(err.code);
    return err.code;
  }

  it(`answers any request body with a CNI decoding or environment error (${RUNS.body} runs)`, async () => {
    const before = await stored();
    const body = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 200 }),
      fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
      fc.json().filter((j) => !j.startsWith('{')),
      fc.constantFrom(
        '',
        '{',
        '}',
        'null',
        '[]',
        '"x"',
        '{"env":',
        '{"env":{}}',
        '\u0000',
        '{"env":{"CNI_COMMAND":"ADD"}',
      ),
      huge(10_000, 200_000),
    );
    await checkProperty(
      fc.asyncProperty(body, async (b) => {
        count('body');
        const a = await postCni(socketPath, b);
        expectRefusal(a, [4, 6], 'garbage body');
        expect(await stored()).to.equal(before);
      }),
      params(RUNS.body),
    );
  });

  it(`refuses envelopes with wrong types with code 6 and stores nothing (${RUNS.envelope} runs)`, async () => {
    const before = await stored();
    const notString = fc.oneof(
      fc.integer(),
      fc.boolean(),
      fc.constant(null),
      fc.array(fc.string(), { maxLength: 3 }),
      fc.object({ maxDepth: 2 }),
    );
    const envelope = fc.oneof(
      fc.record({
        env: fc.oneof(
          notString.filter((v) => typeof v !== 'object' || v === null || Array.isArray(v)),
          fc.string(),
        ),
        stdin: fc.string(),
      }),
      fc.record({
        env: fc.dictionary(fc.constantFrom('CNI_COMMAND', 'CNI_NETNS', 'CNI_CONTAINERID', 'X'), notString, {
          minKeys: 1,
        }),
        stdin: fc.string(),
      }),
      fc.record({ env: fc.constant({ CNI_COMMAND: 'VERSION' }), stdin: notString }),
    );
    await checkProperty(
      fc.asyncProperty(envelope, async (e) => {
        count('envelope');
        const a = await postCni(socketPath, JSON.stringify(e));
        expectRefusal(a, [6], 'wrong types');
        expect(await stored()).to.equal(before);
      }),
      params(RUNS.envelope),
    );
  });

  it(`answers random CNI calls with a spec error code, and stores only a valid ADD (${RUNS.calls} runs)`, async () => {
    const before = await stored();
    const config = fc.record(
      {
        cniVersion: fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...SUPPORTED_CNI_VERSIONS) },
          { weight: 1, arbitrary: fc.anything() },
        ),
        name: fc.oneof(
          { weight: 4, arbitrary: fc.constant('fuzznet') },
          { weight: 1, arbitrary: fc.anything() },
        ),
        type: fc.oneof(
          { weight: 4, arbitrary: fc.constant('workloadnet') },
          { weight: 1, arbitrary: fc.anything() },
        ),
        mtu: fc.oneof(fc.integer({ min: -10, max: 70_000 }), fc.anything()),
        runtimeConfig: fc.anything(),
        prevResult: fc.anything(),
        dns: fc.anything(),
        'cni.dev/valid-attachments': fc.oneof(
          fc.anything(),
          fc.array(fc.record({ containerID: fc.string(), ifname: fc.string() }), { maxLength: 3 }),
        ),
      },
      { requiredKeys: [] },
    );
    const stdin = fc.oneof(
      { weight: 6, arbitrary: config.map((c) => JSON.stringify(c)) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 50 }) },
      { weight: 1, arbitrary: fc.json() },
    );
    const env = fc.record(
      {
        CNI_COMMAND: fc.oneof(
          { weight: 6, arbitrary: fc.constantFrom('ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION') },
          { weight: 1, arbitrary: fc.constantFrom('add', 'ADD ', '', 'X') },
        ),
        CNI_CONTAINERID: fc.oneof(
          fc.stringMatching(/^[a-z0-9][a-z0-9_.-]{0,20}$/),
          fc.string({ unit: 'binary', maxLength: 30 }),
          huge(250, 300),
        ),
        CNI_NETNS: fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...zoo.valid, ...zoo.invalid) },
          { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
        ),
        CNI_IFNAME: fc.oneof(
          fc.constantFrom('eth0', 'net1', ''),
          fc.string({ unit: 'binary', maxLength: 20 }),
        ),
        CNI_PATH: fc.constantFrom('/opt/cni/bin', ''),
        CNI_ARGS: fc.oneof(
          fc.constantFrom(
            '',
            'IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns',
            'K8S_POD_NAME',
            'FOO=bar',
            'IgnoreUnknown=maybe',
            ';;',
          ),
          fc.string({ maxLength: 40 }),
        ),
      },
      { requiredKeys: ['CNI_COMMAND'] },
    );
    // A valid ADD, as a runtime sends it; and the same with one variable or the config drawn from the
    // arbitrary generators above.
    const goodEnv = fc.record({
      CNI_COMMAND: fc.constant('ADD'),
      CNI_CONTAINERID: fc.stringMatching(/^[a-z0-9][a-z0-9_.-]{0,40}$/),
      CNI_NETNS: fc.constantFrom(...zoo.valid),
      CNI_IFNAME: fc.oneof(fc.constant('eth0'), fc.stringMatching(/^[a-z][a-z0-9]{0,14}$/)),
      CNI_PATH: fc.constant('/opt/cni/bin'),
      CNI_ARGS: fc.constantFrom('', 'IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns;K8S_POD_UID=u'),
    });
    const goodStdin = fc
      .record({
        cniVersion: fc.constantFrom(...SUPPORTED_CNI_VERSIONS),
        mtu: fc.option(fc.integer({ min: 68, max: 65535 }), { nil: undefined }),
      })
      .map((c) => JSON.stringify({ ...c, name: 'fuzznet', type: 'workloadnet' }));
    type Var = 'CNI_COMMAND' | 'CNI_CONTAINERID' | 'CNI_NETNS' | 'CNI_IFNAME' | 'CNI_PATH' | 'CNI_ARGS';
    const call = fc.oneof(
      { weight: 1, arbitrary: fc.tuple(goodEnv, goodStdin) },
      { weight: 1, arbitrary: fc.tuple(goodEnv, stdin) },
      {
        weight: 2,
        arbitrary: fc.tuple(
          fc
            .constantFrom<Var>(
              'CNI_COMMAND',
              'CNI_CONTAINERID',
              'CNI_NETNS',
              'CNI_IFNAME',
              'CNI_PATH',
              'CNI_ARGS',
            )
            .chain((v) => fc.tuple(goodEnv, env).map(([g, e]) => ({ ...g, [v]: e[v] }))),
          goodStdin,
        ),
      },
      { weight: 3, arbitrary: fc.tuple(env, stdin) },
    );
    await checkProperty(
      fc.asyncProperty(call, async ([e, s]) => {
        const vars = Object.fromEntries(
          Object.entries(e).filter((kv): kv is [string, string] => typeof kv[1] === 'string'),
        );
        count(`call ${vars.CNI_COMMAND ?? ''}`);
        const a = await postCni(socketPath, cniEnvelope(vars, s));
        if (a.exitCode === '0') {
          expect(a.status).to.equal(200);
          if (vars.CNI_COMMAND === 'ADD') {
            count('call ADD (accepted)');
            // Accepted only when what matters is really valid, and then stored under (container, ifname).
            expect(zoo.valid, 'ADD accepted with this CNI_NETNS').to.include(vars.CNI_NETNS);
            expect(
              containerIdOk(vars.CNI_CONTAINERID ?? ''),
              `container id ${JSON.stringify(vars.CNI_CONTAINERID)}`,
            ).to.equal(true);
            expect(ifNameOk(vars.CNI_IFNAME ?? ''), `ifname ${JSON.stringify(vars.CNI_IFNAME)}`).to.equal(
              true,
            );
            const result = JSON.parse(a.body) as { ips?: unknown[] };
            expect(result.ips, a.body).to.have.length(1);
            const [att] = await d.daemon.service.get(vars.CNI_CONTAINERID ?? '', vars.CNI_IFNAME);
            expect(att?.origin).to.equal('cni');
            const del = await postCni(
              socketPath,
              cniEnvelope({ ...vars, CNI_COMMAND: 'DEL', CNI_ARGS: '' }, s),
            );
            expect(del.exitCode, del.body).to.equal('0');
          } else if (vars.CNI_COMMAND === 'VERSION') {
            expect((JSON.parse(a.body) as { supportedVersions?: string[] }).supportedVersions).to.include(
              '1.1.0',
            );
          } else {
            expect(a.body, `${vars.CNI_COMMAND} prints nothing on success`).to.equal('');
          }
        } else {
          expectRefusal(a, INPUT_ERROR_CODES, `${vars.CNI_COMMAND} call`);
        }
        expect(await stored()).to.equal(before);
      }),
      params(RUNS.calls),
    );
  });

  it(`answers deeply nested JSON anywhere with a spec code, never an internal error, storing nothing (${RUNS.nested} runs)`, async () => {
    const before = await stored();
    const base = {
      CNI_CONTAINERID: 'deep',
      CNI_NETNS: zoo.valid[0] ?? '',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
    };
    // "mtu" is left out: it has its own test below.
    const where = fc.constantFrom(
      'body',
      'stdin',
      'env',
      'prevResult',
      'runtimeConfig',
      'dns',
      'name',
      'cni.dev/valid-attachments',
    );
    await checkProperty(
      fc.asyncProperty(
        where,
        deepJson,
        fc.constantFrom('ADD', 'DEL', 'CHECK', 'GC', 'STATUS'),
        async (at, deep, command) => {
          count(`nested in ${at}`);
          const env = { ...base, CNI_COMMAND: command };
          const cfg = (field: string): string =>
            `{"cniVersion":"1.1.0","name":"n","type":"workloadnet","${field}":${deep}}`;
          const body =
            at === 'body'
              ? deep
              : at === 'env'
                ? `{"env":${deep},"stdin":"{}"}`
                : at === 'stdin'
                  ? cniEnvelope(env, deep)
                  : cniEnvelope(env, cfg(at));
          const what = `nesting ${Math.round(deep.length / 2)} deep in ${at}, ${command}`;
          const a = await postCni(socketPath, body);
          if (a.exitCode === '0') {
            // Nesting inside a field the adapter ignores is harmless; an ADD that went through is undone.
            count('nested (accepted)');
            if (command === 'ADD') {
              const del = await postCni(
                socketPath,
                cniEnvelope(
                  { ...env, CNI_COMMAND: 'DEL' },
                  '{"cniVersion":"1.1.0","name":"n","type":"workloadnet"}',
                ),
              );
              expect(del.exitCode, `${what}: DEL after ADD: ${del.body.slice(0, 300)}`).to.equal('0');
            }
          } else {
            expectRefusal(a, INPUT_ERROR_CODES, what);
          }
          expect(await stored()).to.equal(before);
        },
      ),
      params(RUNS.nested),
    );
  });

  it('refuses a deeply nested "mtu" with code 7', async () => {
    const depth = 200_000;
    const stdin = `{"cniVersion":"1.1.0","name":"n","type":"workloadnet","mtu":${'['.repeat(depth)}1${']'.repeat(depth)}}`;
    const env = {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'deep-mtu',
      CNI_NETNS: zoo.valid[0] ?? '',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
    };
    const a = await postCni(socketPath, cniEnvelope(env, stdin));
    expectRefusal(a, [7], 'deeply nested mtu');
  });

  it(`survives HTTP the forwarder never sends: wrong paths and methods, oversize and lying bodies, garbage (${RUNS.http} runs)`, async () => {
    const before = await stored();
    const version = cniEnvelope({ CNI_COMMAND: 'VERSION' }, '');
    const kind = fc.oneof(
      fc.record({
        k: fc.constant('path' as const),
        p: fc.oneof(
          fc.constantFrom('/', '/v1', '/v1/cni/', '/v2/cni', '/v1/cni?x=1', '//v1/cni', '/../v1/cni', '*'),
          fc.webPath(),
        ),
      }),
      fc.record({
        k: fc.constant('method' as const),
        m: fc.constantFrom('GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
      }),
      fc.record({
        k: fc.constant('oversize' as const),
        n: fc.integer({ min: 1024 * 1024 + 1, max: 3 * 1024 * 1024 }),
      }),
      fc.record({ k: fc.constant('lie' as const), n: fc.integer({ min: 1, max: 1000 }) }),
      fc.record({
        k: fc.constant('raw' as const),
        b: fc.oneof(
          fc.uint8Array({ maxLength: 300 }).map((x) => Buffer.from(x)),
          fc.constantFrom(
            'GET / HTTP/1.1\r\n\r\n',
            'POST /v1/cni HTTP/1.1\r\nContent-Length: -1\r\n\r\n',
            'POST /v1/cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
            `POST /v1/cni HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(3000)}\r\n`,
          ),
        ),
      }),
    );
    await checkProperty(
      fc.asyncProperty(kind, async (c) => {
        count(`http ${c.k}`);
        if (c.k === 'path') {
          const a = await postCni(socketPath, version, { path: c.p });
          if (c.p !== '/v1/cni') {
            expect(a.status).to.equal(404);
            expectRefusal({ ...a, status: 200 }, [999], 'unknown path', false);
          }
        } else if (c.k === 'method') {
          // No body: the server answers 405 without reading one, and a client still writing would see EPIPE.
          const a = await postCni(socketPath, '', { method: c.m });
          expect(a.status).to.equal(405);
          if (c.m !== 'HEAD') expectRefusal({ ...a, status: 200 }, [999], 'wrong method', false);
        } else if (c.k === 'oversize') {
          const a = await postCni(socketPath, Buffer.alloc(c.n, 0x20)).catch((err: Error) => err);
          // Past 16 MiB the server may cut the connection; below it answers code 6.
          if (!(a instanceof Error)) expectRefusal(a, [6], `body of ${c.n} bytes`);
        } else if (c.k === 'lie') {
          // Content-Length larger than the body, then the client goes away.
          await rawExchange(
            socketPath,
            `POST /v1/cni HTTP/1.1\r\nHost: x\r\nContent-Length: ${c.n + 10}\r\n\r\n${'{'.repeat(Math.min(c.n, 5))}`,
            200,
          );
        } else {
          await rawExchange(socketPath, c.b, 200);
        }
        // Still serving.
        const v = await postCni(socketPath, version);
        expect(v.exitCode, v.body).to.equal('0');
        expect(await stored()).to.equal(before);
      }),
      params(RUNS.http),
    );
  });
});

// The forwarder decides on its own whether stdin is a decodable network config (answering 6 without the
// daemon). It must draw the line exactly where the daemon's JSON.parse does: anything JSON.parse takes as
// an object goes on to the daemon (here: an unreachable socket, so 50), anything else is 6. No root needed.
describe('fuzz: the CNI forwarder decodes stdin exactly as the daemon does', function () {
  this.timeout(180_000);
  const RUNS_FWD = scaled(250);
  let dir: string;
  let shim: string;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnr-fwd-'));
    shim = await buildShim(dir);
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  /** What the daemon makes of stdin: an object to act on, or a decoding failure (over 1 MiB: too big). */
  function daemonView(stdin: string): 'object' | 'undecodable' {
    if (Buffer.byteLength(stdin) > 1024 * 1024) return 'undecodable';
    try {
      const v: unknown = JSON.parse(stdin);
      return typeof v === 'object' && v !== null && !Array.isArray(v) ? 'object' : 'undecodable';
    } catch {
      return 'undecodable';
    }
  }

  const mutate = (text: string, at: number, op: number, ch: string): string => {
    const i = text.length === 0 ? 0 : at % (text.length + 1);
    if (op === 0) return text.slice(0, i) + text.slice(i + 1);
    if (op === 1) return text.slice(0, i) + ch + text.slice(i);
    return text.slice(0, i);
  };
  const jsonText = fc.oneof(
    fc.json({ maxDepth: 4 }),
    fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 })).map((o) => JSON.stringify(o, null, 1)),
  );
  const stdinArb = fc.oneof(
    jsonText,
    fc
      .tuple(
        jsonText,
        fc.nat(),
        fc.integer({ min: 0, max: 2 }),
        fc.constantFrom(...' \t\n\r{}[]",:\\0-+.eE1tfnu\u0000\u00a0\ufeff'),
      )
      .map(([t, at, op, ch]) => mutate(t, at, op, ch)),
    fc.string({ unit: 'binary', maxLength: 64 }),
    // Deep nesting on both sides of the 1 MiB limit: the scanner must neither recurse nor misjudge it.
    fc
      .tuple(fc.integer({ min: 2_000, max: 250_000 }), fc.boolean())
      .map(([depth, arrays]) =>
        arrays
          ? `${'['.repeat(depth)}1${']'.repeat(depth)}`
          : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`,
      ),
  );

  it(`answers 6 exactly when JSON.parse would not give the daemon an object (${RUNS_FWD} runs)`, async () => {
    const nowhere = path.join(dir, 'nobody.sock');
    const env = { CNI_COMMAND: 'GC', WORKLOADNET_CNI_SOCKET: nowhere, WORKLOADNET_CNI_CONNECT_RETRY_MS: '0' };
    await checkProperty(
      fc.asyncProperty(stdinArb, async (stdin) => {
        const run = await runShim(shim, env, stdin);
        const err = JSON.parse(run.stdout) as { code: number; msg: string };
        const what = `${JSON.stringify(stdin.slice(0, 200))}: ${err.msg}`;
        if (daemonView(stdin) === 'object') {
          // 7 only for a member the forwarder itself reads ("connectRetryMs"), with the wrong type.
          expect([50, 7], what).to.include(err.code);
        } else {
          expect(err.code, what).to.equal(6);
        }
      }),
      { numRuns: RUNS_FWD, seed: TORTURE_SEED, endOnFailure: true },
    );
  });
});
