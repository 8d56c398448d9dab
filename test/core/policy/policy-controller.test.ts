import { expect } from 'chai';
import { createLogger } from '../../../core/logger';
import type {
  CompiledPolicy,
  PolicyDataplane,
  PolicyDenials,
  PolicyTouched,
} from '../../../core/policy-dataplane';
import type {
  PodIdentity,
  PolicyChange,
  PolicyPod,
  PolicySource,
  PolicySourceStatus,
  PolicyState,
} from '../../../core/policy-source';
import { PolicyController, type PolicyBookPort } from '../../../core/policy/policy-controller';
import type { PolicyRow } from '../../../core/policy/local-pods';
import type { LocalPod } from '../../../core/policy/trusted-pods';
import { LogSink } from '../../support/log-sink';
import { waitUntil } from '../../support/wait-until';

// The controller as the attach flow's gate, with a source and a dataplane the test drives: what it
// refuses before anything changes, when an attach may answer, and what a failed apply does. The
// compiler and the kernel have their own tests; here the book only records which local pods it holds.

class TestSource implements PolicySource {
  private listeners: Array<(c: PolicyChange) => void> = [];
  isSynced = false;
  pods = new Map<string, PolicyPod>();
  lookups = 0;
  lookupError?: Error;
  start = async (): Promise<void> => undefined;
  stop = async (): Promise<void> => undefined;
  synced(): boolean {
    return this.isSynced;
  }
  state(): PolicyState {
    return { namespaces: new Map(), pods: this.pods, policies: new Map() };
  }
  onChange(l: (c: PolicyChange) => void): void {
    this.listeners.push(l);
  }
  async lookupPod(id: PodIdentity): Promise<PolicyPod | undefined> {
    this.lookups++;
    if (this.lookupError) throw this.lookupError;
    return this.pods.get(`${id.namespace}/${id.name}`);
  }
  status(): PolicySourceStatus {
    return { synced: this.isSynced, namespaces: 0, pods: this.pods.size, policies: 0, reasons: ['API away'] };
  }
  sync(): void {
    this.isSynced = true;
    for (const l of this.listeners) l({ kind: 'all' });
  }
}

class TestDataplane implements PolicyDataplane {
  readonly where = 'host' as const;
  applied: CompiledPolicy[] = [];
  fail?: Error;
  gate?: Promise<void>;
  attempts = 0;
  async apply(program: CompiledPolicy): Promise<void> {
    this.attempts++;
    await this.gate;
    if (this.fail) throw this.fail;
    this.applied.push(program);
  }
  invalidations = 0;
  invalidate(): void {
    this.invalidations++;
  }
  counterReads = 0;
  async denied(): Promise<ReadonlyMap<string, PolicyDenials>> {
    this.counterReads++;
    return new Map([['w1/eth0', { ingress: 3, egress: 1 }]]);
  }
  async remove(): Promise<void> {}
  readonly left = new Map<string, string>();
  unenforced(): ReadonlyMap<string, string> {
    return this.left;
  }
}

/** Holds the local pods; every pod is isolated for ingress with no rule. */
class TestBook implements PolicyBookPort {
  readonly local = new Map<string, LocalPod>();
  sourceChanged(_c: PolicyChange, _s: PolicyState): PolicyTouched {
    return { sets: new Set(), pods: new Set(this.local.keys()) };
  }
  addLocal(pod: LocalPod): PolicyTouched {
    this.local.set(pod.key, pod);
    return { sets: new Set(), pods: new Set([pod.key]) };
  }
  rangesChanged(): PolicyTouched {
    return { sets: new Set(), pods: new Set() };
  }
  removeLocal(key: string): PolicyTouched {
    return { sets: new Set(), pods: new Set(this.local.delete(key) ? [key] : []) };
  }
  program(): CompiledPolicy {
    const pods = [...this.local.values()].map(
      (p) =>
        [
          p.key,
          {
            key: p.key,
            pod: `${p.pod.namespace}/${p.pod.name}`,
            hostIf: p.hostIf,
            ips: p.ips,
            ingress: { rules: [] },
            policies: [],
          },
        ] as const,
    );
    return { sets: new Map(), pods: new Map(pods) };
  }
}

const POD: PolicyPod = {
  namespace: 'x',
  name: 'a',
  uid: 'u1',
  labels: { pod: 'a' },
  ips: [],
  namedPorts: [],
  nodeName: 'n1',
  hostNetwork: false,
};
const CALL = {
  key: 'w1/eth0',
  workloadId: 'w1',
  network: 'default',
  pod: { namespace: 'x', name: 'a', uid: 'u1' },
};
const ROW: PolicyRow = {
  key: 'w1/eth0',
  network: 'default',
  pod: CALL.pod,
  ips: [{ address: '10.1.0.5' }],
  dataplane: { hostIfName: 'wn1234' },
};

describe('NetworkPolicy controller as the attach gate', () => {
  let source: TestSource;
  let dataplane: TestDataplane;
  let books: TestBook[];
  let controller: PolicyController;

  const make = (
    opts: {
      dataplane?: boolean;
      allowUnenforced?: boolean;
      admitTimeoutMs?: number;
      recheckMs?: number;
    } = {},
  ): PolicyController =>
    new PolicyController({
      source,
      targets: [
        {
          backend: 'linux',
          dataplane: opts.dataplane === false ? undefined : dataplane,
          networks: ['default'],
        },
      ],
      newBook: (_state, locals) => {
        const b = new TestBook();
        for (const l of locals) b.addLocal(l);
        books.push(b);
        return b;
      },
      rows: () => [],
      nodeName: 'n1',
      localRanges: () => ['10.1.0.0/24'],
      admitTimeoutMs: opts.admitTimeoutMs ?? 200,
      recheckIntervalMs: opts.recheckMs ?? 60_000,
      allowUnenforced: opts.allowUnenforced ?? false,
      log: createLogger('info', new LogSink()),
    });

  beforeEach(() => {
    source = new TestSource();
    dataplane = new TestDataplane();
    books = [];
    controller = make();
  });
  afterEach(async () => controller.stop());

  it('lets a call without a pod identity through untouched', async () => {
    await controller.start();
    expect(await controller.admit({ ...CALL, pod: undefined })).to.equal(undefined);
    expect(source.lookups).to.equal(0);
  });

  it('refuses a pod, UNAVAILABLE in words, while the source has not listed everything once, and applies nothing', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    const err = await controller.admit(CALL).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    expect(err?.message).to.match(/no full list of namespaces, pods and policies yet \(API away\).*x\/a/);
    expect((err as { grpcCode?: number } | undefined)?.grpcCode).to.equal(14);
    expect(dataplane.applied).to.have.length(0);
  });

  it('refuses a pod the API does not know, and one whose labels cannot be read, before anything changes', async () => {
    await controller.start();
    source.sync();
    const unknown = await controller.admit(CALL).catch((e: Error) => e);
    expect((unknown as Error).message).to.include('has no pod x/a with uid u1');
    source.lookupError = new Error('connect ECONNREFUSED');
    const away = await controller.admit(CALL).catch((e: Error) => e);
    expect((away as Error).message).to.include('cannot be known (connect ECONNREFUSED)');
    expect(books[0]?.local.size).to.equal(0);
  });

  it('answers an attach only once the apply holding its pod is done', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    source.sync();
    let open!: () => void;
    dataplane.gate = new Promise((r) => (open = r));
    const admitted = await controller.admit(CALL);
    let answered = false;
    const enforced = controller.enforce(admitted, ROW).then(() => (answered = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(answered, 'answered before its rules were applied').to.equal(false);
    open();
    await enforced;
    const last = dataplane.applied.at(-1);
    expect([...(last?.pods.keys() ?? [])]).to.deep.equal(['w1/eth0']);
    expect(last?.pods.get('w1/eth0')?.hostIf).to.equal('wn1234');
  });

  it('fails the attach when its apply fails, and takes the pod out again on release', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    source.sync();
    const admitted = await controller.admit(CALL);
    dataplane.fail = new Error('nft: No such file or directory');
    const err = await controller.enforce(admitted, ROW).catch((e: Error) => e);
    expect((err as Error).message).to.include('nft: No such file');
    dataplane.fail = undefined;
    await controller.release(ROW.key);
    expect(books[0]?.local.size).to.equal(0);
  });

  it('does not hold a detach through the retry backoff while applies fail; the next apply that succeeds takes the pod out', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    source.sync();
    const admitted = await controller.admit(CALL);
    dataplane.fail = new Error('nft: Operation not permitted');
    await controller.enforce(admitted, ROW).catch(() => undefined);
    const tried = dataplane.attempts;
    await controller.release(ROW.key);
    expect(dataplane.attempts, 'released without waiting for a retry').to.equal(tried);
    expect(books[0]?.local.size).to.equal(0);
    dataplane.fail = undefined;
    await waitUntil(async () => dataplane.applied.length > 0, 'the retry', 2000, { intervalMs: 20 });
    expect([...(dataplane.applied.at(-1)?.pods.keys() ?? [])]).to.deep.equal([]);
  });

  it('reads the dataplane again and applies every recheck interval, so that drift is put back', async () => {
    controller = make({ recheckMs: 50 });
    await controller.start();
    source.sync();
    await new Promise((r) => setTimeout(r, 20));
    const applies = dataplane.applied.length;
    await new Promise((r) => setTimeout(r, 180));
    expect(dataplane.invalidations).to.be.greaterThanOrEqual(2);
    expect(dataplane.applied.length - applies).to.be.greaterThanOrEqual(2);
  });

  it('refuses a pod on a backend that cannot enforce, unless unenforced pods are allowed (then names it)', async () => {
    controller = make({ dataplane: false });
    await controller.start();
    source.sync();
    const err = await controller.admit(CALL).catch((e: Error) => e);
    expect((err as Error).message).to.include('cannot enforce NetworkPolicy');
    expect((err as Error).message).to.include('dpu.allowUnenforcedPolicy');
    await controller.stop();
    controller = make({ dataplane: false, allowUnenforced: true });
    await controller.start();
    source.sync();
    expect(await controller.admit(CALL)).to.equal(undefined);
    expect((await controller.status()).unenforced).to.deep.equal(['w1/eth0']);
  });

  it('reads the denied counters for a Status that asks for them, and not for the readiness poll', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    source.sync();
    await controller.enforce(await controller.admit(CALL), ROW);
    const polled = await controller.status({ counters: false });
    expect(dataplane.counterReads).to.equal(0);
    expect(polled).to.include({ ready: true, podsIsolated: 1 });
    expect((await controller.status()).denied).to.deep.equal({ ingress: 3, egress: 1 });
    expect(dataplane.counterReads).to.equal(1);
  });

  it('refuses a pod its dataplane left unenforced (a DPU agent without policy), unless allowed; Status names it', async () => {
    await controller.start();
    source.pods.set('x/a', POD);
    source.sync();
    dataplane.left.set(
      ROW.key,
      'DPU agent d1 speaks protocol version 3, so it cannot enforce the NetworkPolicy of x/a',
    );
    const err = await controller.enforce(await controller.admit(CALL), ROW).catch((e: Error) => e);
    expect((err as Error).message).to.match(/protocol version 3.*not attached.*dpu\.allowUnenforcedPolicy/);
    expect((err as { grpcCode?: number }).grpcCode).to.equal(9);
    await controller.stop();
    controller = make({ allowUnenforced: true });
    await controller.start();
    source.sync();
    await controller.enforce(await controller.admit(CALL), ROW);
    expect((await controller.status()).unenforced).to.deep.equal([ROW.key]);
  });
});
