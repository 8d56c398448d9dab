import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import {
  AckCode,
  ObjectKind,
  type AgentMessage,
  type ControllerMessage,
  type Inventory,
  LinkState,
  PortOperState,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { okAck } from '../support/dpu-fixtures';
import { RawAgent } from '../support/raw-agent';
import { SimProcess, sleep, waitUntil } from '../support/sim-process';
import { attachRequest, detachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { codeName, outcome } from '../support/grpc-outcome';
import { checkProperty } from './property-check';
import { scaled, TORTURE_SEED } from './torture-settings';

// A hand-driven agent sends the real daemon (DPU backend) random sequences of messages a correct
// agent never would: out of order, duplicated, stale or future generations, acks for unknown ports,
// unknown enum values, oversize messages, floods, bytes that are not protobuf at all, and streams cut
// at any point. Throughout, the daemon stays up, answers Status, and its attachments do not change;
// afterwards a well-behaved agent resynchronises to exactly those attachments and new ones work.

const RUNS = scaled(150);
const AGENT_SERVICE_PATH = '/workloadnet.dpu.v1.DpuAgentService/Connect';

type NameSel =
  { from: 'known'; i: number } | { from: 'received'; i: number } | { from: 'literal'; s: string };
type GenSel = { from: 'received'; delta: number } | { from: 'literal'; n: number };

type Action =
  | {
      a: 'hello';
      agentId: string;
      bootId: string;
      version: number;
      maxPorts: number;
      minMtu: number;
      maxMtu: number;
      ipv6: boolean;
      features: string[];
      /** A version range (protocol 2); [0, 0] is a version 1 hello. */
      range: [number, number];
    }
  | { a: 'inventory'; inventory: Inventory }
  | {
      a: 'ack';
      name: NameSel;
      gen: GenSel;
      code: number;
      message: string;
      retryable: boolean;
      netdev: string;
      pfIndex: number | undefined;
      vfIndex: number | undefined;
      times: number;
    }
  | { a: 'status'; name: NameSel; state: number; message: string }
  | { a: 'heartbeat'; seq: number; times: number }
  | { a: 'empty' }
  | { a: 'oversize'; bytes: number }
  | { a: 'pause'; ms: number }
  | { a: 'halfClose' }
  | { a: 'cancel' };

const nameSel: fc.Arbitrary<NameSel> = fc.oneof(
  fc.record({ from: fc.constant('known' as const), i: fc.nat(20) }),
  fc.record({ from: fc.constant('received' as const), i: fc.nat(20) }),
  fc.record({
    from: fc.constant('literal' as const),
    s: fc.oneof(
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.constantFrom('', '/', 'x/eth0', 'a'.repeat(5000)),
    ),
  }),
);
const genSel: fc.Arbitrary<GenSel> = fc.oneof(
  fc.record({ from: fc.constant('received' as const), delta: fc.integer({ min: -3, max: 3 }) }),
  fc.record({
    from: fc.constant('literal' as const),
    n: fc.oneof(fc.constantFrom(0, 1, Number.MAX_SAFE_INTEGER), fc.nat()),
  }),
);
const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      a: fc.constant('hello' as const),
      agentId: fc.oneof(
        { weight: 5, arbitrary: fc.constant('dpu-fuzz') },
        { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
      ),
      bootId: fc.oneof(fc.constantFrom('boot-1', 'boot-2'), fc.string({ maxLength: 20 })),
      version: fc.oneof(
        { weight: 5, arbitrary: fc.constant(1) },
        { weight: 1, arbitrary: fc.constantFrom(0, 2, 7, 0xffffffff) },
      ),
      maxPorts: fc.oneof(fc.constant(0), fc.nat(10)),
      minMtu: fc.oneof(fc.constant(68), fc.nat(70_000)),
      maxMtu: fc.oneof(fc.constant(9216), fc.nat(70_000)),
      ipv6: fc.boolean(),
      features: fc.array(
        fc.oneof(
          fc.constantFrom('vlan', 'vni', 'qos-rate', 'qos-trust', 'pf-select'),
          fc.string({ maxLength: 10 }),
        ),
        { maxLength: 3 },
      ),
      range: fc.oneof(
        { weight: 3, arbitrary: fc.constant<[number, number]>([0, 0]) },
        { weight: 3, arbitrary: fc.constantFrom<[number, number]>([1, 2], [2, 2], [1, 9]) },
        { weight: 1, arbitrary: fc.tuple(fc.nat(5), fc.oneof(fc.nat(5), fc.constant(0xffffffff))) },
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      a: fc.constant('inventory' as const),
      inventory: fc.record({
        pfs: fc.array(
          fc.record({
            index: fc.oneof(fc.nat(3), fc.constant(0xffffffff)),
            name: fc.oneof(
              fc.constantFrom('pf0', 'lo', '', 'a/b', 'x'.repeat(20)),
              fc.string({ maxLength: 16 }),
            ),
            pciAddress: fc.constantFrom('0000:03:00.0', '', 'not-pci'),
            linkState: fc.integer({ min: -1, max: 4 }) as fc.Arbitrary<LinkState>,
            speedMbps: fc.nat(),
            mtu: fc.nat(70_000),
            vfTotal: fc.oneof(fc.nat(4), fc.constant(0xffffffff)),
            vfFree: fc.nat(5),
            vfs: fc.array(
              fc.record({
                index: fc.nat(5),
                netdev: fc.oneof(
                  fc.constantFrom('fuzz-vf0', 'lo', '', 'nonexistent9'),
                  fc.string({ maxLength: 16 }),
                ),
                pciAddress: fc.constantFrom('0000:03:00.2', '', 'zz'),
              }),
              { maxLength: 4 },
            ),
          }),
          { maxLength: 3 },
        ),
        firmwareVersion: fc.string({ maxLength: 200 }),
        agentVersion: fc.string({ maxLength: 20 }),
      }),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      a: fc.constant('ack' as const),
      name: nameSel,
      gen: genSel,
      code: fc.oneof(
        fc.constantFrom(
          AckCode.ACK_CODE_OK,
          AckCode.ACK_CODE_INVALID,
          AckCode.ACK_CODE_INTERNAL,
          AckCode.ACK_CODE_UNSPECIFIED,
        ),
        fc.integer({ min: -5, max: 50 }),
      ),
      message: fc.string({ maxLength: 30 }),
      retryable: fc.boolean(),
      // Never a real link's name: with the "none" dataplane no endpoint is ever plumbed anyway.
      netdev: fc.constantFrom('', 'fuzz-vf0', 'nonexistent9'),
      pfIndex: fc.option(fc.nat(3), { nil: undefined }),
      vfIndex: fc.option(fc.nat(3), { nil: undefined }),
      times: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      a: fc.constant('status' as const),
      name: nameSel,
      state: fc.integer({ min: -1, max: 6 }),
      message: fc.string({ maxLength: 20 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      a: fc.constant('heartbeat' as const),
      seq: fc.nat(),
      times: fc.oneof(
        { weight: 5, arbitrary: fc.constant(1) },
        { weight: 1, arbitrary: fc.integer({ min: 100, max: 3000 }) },
      ),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ a: 'empty' as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      a: fc.constant('oversize' as const),
      bytes: fc.integer({ min: 257 * 1024, max: 2 * 1024 * 1024 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ a: fc.constant('pause' as const), ms: fc.integer({ min: 0, max: 60 }) }),
  },
  { weight: 1, arbitrary: fc.constant({ a: 'halfClose' as const }) },
  { weight: 1, arbitrary: fc.constant({ a: 'cancel' as const }) },
);

/** An agent stream that writes raw bytes: frames that are not an AgentMessage at all. */
function garbageStream(socket: string, frames: Uint8Array[]): Promise<void> {
  const client = new grpc.Client(`unix:${socket}`, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest(
    AGENT_SERVICE_PATH,
    (b: Buffer) => b,
    (b: Buffer) => b,
  );
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      client.close();
      resolve();
    };
    const timer = setTimeout(() => {
      call.cancel();
      done();
    }, 500);
    call.on('error', done);
    call.on('status', done);
    call.on('data', () => undefined);
    for (const f of frames) call.write(Buffer.from(f));
  });
}

describeRoot('fuzz: DPU agent stream (real daemon, root for test-owned namespaces)', function () {
  this.timeout(240_000);
  const namespaces = new NetnsSet('wnr-');
  const tried: Record<string, number> = {};
  const streamEnds: Record<string, number> = {};
  let dir: string;
  let agentSocket: string;
  let daemon: DaemonProcess;
  let sim: SimProcess | undefined;
  /** The attachments while their agent is away (degraded), which no fuzzed stream may change. */
  let baseline: string;
  /** The same while their agent was connected (ready), which a resync must bring back. */
  let whileConnected: string;
  let knownKeys: string[];

  const count = (name: string): void => void (tried[name] = (tried[name] ?? 0) + 1);

  async function attachments(): Promise<string> {
    const list = (await daemon.client.call(daemon.client.raw.list, {})).attachments;
    return JSON.stringify(
      list
        .map((a) => ({
          key: `${a.workloadId}/${a.ifName}`,
          ips: a.result?.ips.map((i) => i.cidr),
          state: a.state,
          netns: a.netnsPath,
        }))
        .sort((x, y) => x.key.localeCompare(y.key)),
    );
  }

  const startSim = (): SimProcess =>
    SimProcess.start({
      socket: agentSocket,
      agentId: 'dpu-fuzz',
      bootId: 'sim-boot',
      stateFile: path.join(dir, 'sim.json'),
      extra: ['--dataplane', 'none', '--log-level', 'warn'],
    });

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnr-dpu-fuzz-'));
    agentSocket = path.join(dir, 'agent.sock');
    const node = namespaces.add().name;
    daemon = await DaemonProcess.start({
      dir,
      netns: node,
      flags: {
        backend: 'dpu',
        'agent-socket': agentSocket,
        'pod-cidr': '10.247.0.0/24',
        'ack-timeout-ms': '2000',
        'log-level': 'info',
      },
    });
    sim = startSim();
    await waitUntil(async () => (await daemon.client.status()).ready, 'the simulator to connect', 15_000);
    for (let i = 0; i < 6; i++) {
      const ns = namespaces.add();
      await daemon.client.call(daemon.client.raw.attach, attachRequest(`fz-${i}`, ns.path));
    }
    knownKeys = Array.from({ length: 6 }, (_, i) => `fz-${i}/eth0`);
    whileConnected = await attachments();
    // The well-behaved agent leaves; from now on only the fuzzer speaks to the daemon.
    await sim.stop();
    sim = undefined;
    baseline = await attachments();
    // Their DPU is away: still programmed there, but out of reach.
    expect(baseline).to.equal(whileConnected.replaceAll('"state":"ready"', '"state":"degraded"'));
  });

  after(async () => {
    await sim?.stop('SIGKILL');
    await daemon?.kill('SIGKILL').catch(() => undefined);
    namespaces.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
    console.log(
      `      fuzz-dpu-stream (fast-check seed ${TORTURE_SEED}): ${JSON.stringify(tried)}; how streams ended ${JSON.stringify(streamEnds)}`,
    );
  });

  function resolveName(sel: NameSel, received: ControllerMessage[]): string {
    if (sel.from === 'literal') return sel.s;
    if (sel.from === 'known') return knownKeys[sel.i % knownKeys.length] ?? '';
    const ups = received.filter((m) => m.upsert?.port || m.delete);
    const m = ups[sel.i % Math.max(1, ups.length)];
    return m?.upsert?.port?.name ?? m?.delete?.name ?? knownKeys[0] ?? '';
  }

  function resolveGen(sel: GenSel, name: string, received: ControllerMessage[]): number {
    if (sel.from === 'literal') return sel.n;
    const last = [...received]
      .reverse()
      .find((m) => m.upsert?.port?.name === name || m.delete?.name === name);
    const gen = last?.upsert?.port?.generation ?? last?.delete?.generation ?? 1;
    return Math.max(0, gen + sel.delta);
  }

  /** Plays `actions` on a fresh stream; `greet` first says a proper hello and waits for the snapshot. */
  async function play(actions: Action[], greet: boolean): Promise<void> {
    const agent = new RawAgent(agentSocket);
    try {
      if (greet) {
        count('greeted');
        agent.send(RawAgent.hello('dpu-fuzz'));
        // Refused (another stream holds the session) or accepted with its snapshot: either is a start.
        await agent
          .next((m) => !!m.syncComplete || !!m.helloReject, 'snapshot or reject', 2000)
          .catch(() => undefined);
      }
      for (const act of actions) {
        if (agent.isEnded) break;
        count(act.a);
        const send = (m: AgentMessage): void => agent.send(m);
        switch (act.a) {
          case 'hello':
            send({
              hello: {
                agentId: act.agentId,
                bootId: act.bootId,
                protocolVersion: act.version,
                capabilities: {
                  maxPorts: act.maxPorts,
                  ipv6: act.ipv6,
                  minMtu: act.minMtu,
                  maxMtu: act.maxMtu,
                  features: act.features,
                },
                minProtocolVersion: act.range[0],
                maxProtocolVersion: act.range[1],
                uplinkAddresses: [],
                uplinkMtu: 0,
              },
            });
            await sleep(5);
            break;
          case 'ack': {
            const name = resolveName(act.name, agent.received);
            const generation = resolveGen(act.gen, name, agent.received);
            for (let i = 0; i < act.times; i++) {
              send({
                ack: {
                  name,
                  generation,
                  code: act.code as AckCode,
                  kind: ObjectKind.OBJECT_KIND_PORT,
                  message: act.message,
                  retryable: act.retryable,
                  endpoint: act.netdev
                    ? {
                        netdev: act.netdev,
                        mac: '02:00:00:00:00:99',
                        pfIndex: act.pfIndex,
                        vfIndex: act.vfIndex,
                        pciAddress: '',
                        representor: '',
                      }
                    : undefined,
                },
              });
            }
            break;
          }
          case 'inventory':
            send({ inventory: act.inventory });
            break;
          case 'status':
            send({
              portStatus: {
                name: resolveName(act.name, agent.received),
                operState: act.state as PortOperState,
                message: act.message,
              },
            });
            break;
          case 'heartbeat':
            for (let i = 0; i < act.times && !agent.isEnded; i++) {
              send({ heartbeat: { seq: act.seq + i, sentAtUnixMs: Date.now() } });
              if (i % 200 === 199) await sleep(1);
            }
            break;
          case 'empty':
            send({});
            break;
          case 'oversize':
            send({
              portStatus: {
                name: 'x'.repeat(act.bytes),
                operState: PortOperState.PORT_OPER_STATE_UP,
                message: '',
              },
            });
            break;
          case 'pause':
            await sleep(act.ms);
            break;
          case 'halfClose':
            (
              agent as unknown as { call: grpc.ClientDuplexStream<AgentMessage, ControllerMessage> }
            ).call.end();
            break;
          case 'cancel':
            agent.close();
            break;
        }
      }
      await sleep(10);
      const end = agent.isEnded ? await agent.end(100).catch(() => undefined) : undefined;
      const how = end ? codeName(end.code) : 'open until the agent left';
      streamEnds[how] = (streamEnds[how] ?? 0) + 1;
    } finally {
      agent.close();
    }
  }

  async function daemonStillFine(what: string): Promise<void> {
    expect(daemon.child.exitCode, `${what}: the daemon exited\n${daemon.log()}`).to.equal(null);
    expect(daemon.child.signalCode, `${what}: the daemon was killed\n${daemon.log()}`).to.equal(null);
    const st = await outcome(daemon.client.status());
    expect(codeName(st.code), `${what}: Status ${st.details}`).to.equal('OK');
    expect(await attachments(), `${what}: attachments changed`).to.equal(baseline);
  }

  it(`stays up with unchanged attachments through ${RUNS} random agent streams (one at a time, in pairs, and as raw bytes)`, async () => {
    // Most streams start properly, so that what follows reaches the established session.
    const greet = fc.constantFrom(true, true, true, false);
    const scenario = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          kind: fc.constant('one' as const),
          greet: greet,
          actions: fc.array(action, { minLength: 1, maxLength: 25 }),
        }),
      },
      {
        weight: 2,
        arbitrary: fc.record({
          kind: fc.constant('pair' as const),
          greet: greet,
          a: fc.array(action, { minLength: 1, maxLength: 15 }),
          b: fc.array(action, { minLength: 1, maxLength: 15 }),
        }),
      },
      {
        weight: 2,
        arbitrary: fc.record({
          kind: fc.constant('bytes' as const),
          frames: fc.array(fc.uint8Array({ minLength: 1, maxLength: 200 }), { minLength: 1, maxLength: 5 }),
        }),
      },
    );
    await checkProperty(
      fc.asyncProperty(scenario, async (sc) => {
        count(`scenario ${sc.kind}`);
        if (sc.kind === 'one') await play(sc.actions, sc.greet);
        else if (sc.kind === 'pair') await Promise.all([play(sc.a, sc.greet), play(sc.b, !sc.greet)]);
        else await garbageStream(agentSocket, sc.frames);
        // Let the daemon notice the stream's end before the next one says hello.
        await sleep(20);
        await daemonStillFine(sc.kind);
      }),
      { numRuns: RUNS, seed: TORTURE_SEED, endOnFailure: true },
    );
  });

  it('resynchronises a well-behaved agent to exactly the stored attachments afterwards, and attaches again', async () => {
    sim = startSim();
    await waitUntil(
      async () => (await daemon.client.status()).ready,
      'the simulator to be accepted again',
      15_000,
    );
    const state = await sim.waitForState(
      (s) => s.synced && s.ports.length === knownKeys.length,
      'a full resync',
      15_000,
    );
    expect(state.ports.map((p) => p.name).sort()).to.deep.equal([...knownKeys].sort());
    expect(await attachments()).to.equal(whileConnected);
    const ns = namespaces.add();
    const r = await outcome(daemon.client.call(daemon.client.raw.attach, attachRequest('fz-after', ns.path)));
    expect(codeName(r.code), r.details).to.equal('OK');
    await daemon.client.call(daemon.client.raw.detach, detachRequest('fz-after', ns.path));
    for (const k of knownKeys) {
      const check = await daemon.client.call(daemon.client.raw.check, {
        workloadId: k.split('/')[0] ?? '',
        ifName: 'eth0',
      });
      // "port-down" reports of an earlier agent are covered by their own test below.
      expect(
        check.drift.map((x) => x.kind).filter((kind) => kind !== 'port-down'),
        `drift of ${k} once a correct agent acked it again`,
      ).to.deep.equal([]);
    }
  });

  it('forgets a "port down" report from an earlier agent session once a new agent has re-programmed the port', async () => {
    await sim?.stop();
    sim = undefined;
    await waitUntil(async () => !(await daemon.client.status()).ready, 'the simulator to be gone', 5_000);
    const agent = new RawAgent(agentSocket);
    try {
      agent.send(RawAgent.hello('dpu-fuzz', { bootId: 'boot-before' }));
      await agent.next((m) => !!m.syncComplete, 'the snapshot');
      for (const m of agent.received.filter((x) => x.upsert?.port)) {
        const port = m.upsert?.port;
        if (port) agent.send(okAck(port.name, port.generation));
      }
      agent.send({
        portStatus: {
          name: 'fz-0/eth0',
          operState: PortOperState.PORT_OPER_STATE_DOWN,
          message: 'link lost',
        },
      });
      await waitUntil(
        async () =>
          (
            await daemon.client.call(daemon.client.raw.check, { workloadId: 'fz-0', ifName: 'eth0' })
          ).drift.some((d) => d.kind === 'port-down'),
        'the daemon to record the port as down',
        5_000,
      );
    } finally {
      agent.close();
    }
    // The DPU restarts (new boot id: its state is gone) and a correct agent gets every port re-programmed.
    sim = startSim();
    await sim.waitForState(
      (st) => st.synced && st.ports.length === knownKeys.length,
      'a full resync',
      15_000,
    );
    const check = await daemon.client.call(daemon.client.raw.check, { workloadId: 'fz-0', ifName: 'eth0' });
    expect(check.drift.map((d) => d.kind)).to.deep.equal([]);
  });
});
