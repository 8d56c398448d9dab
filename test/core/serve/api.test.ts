import { expect } from 'chai';
import * as grpc from '@grpc/grpc-js';
import type { ConfigOverrides } from '../../../core/config';
import { internal, unavailable } from '../../../core/errors';
import type { AttachRequest } from '../../../proto/gen/workloadnet/v1/workload';
import { attachRequest } from '../../support/attach-request';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { recordingDaemon } from '../../support/recording-daemon';
import { StandInNamespaces } from '../../support/stand-in-netns';

// The workload API's semantics through a real gRPC client on the unix socket, with the backend swapped
// for a recording one by rebinding it in the DI container. The recording backend enters no namespace,
// so stand-ins serve and the suite needs no root; the cases about which paths are namespaces go to the
// kernel's opener, which refuses them without root too.

function codeOf(err: unknown): string {
  return grpc.status[(err as grpc.ServiceError).code] ?? 'none';
}

async function rejects(p: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as grpc.ServiceError;
  }
  throw new Error('expected the call to fail');
}

describe('workload API (recording backend, stand-in namespaces, no root needed)', () => {
  const namespaces = new StandInNamespaces();
  let ns1: string;
  let ns2: string;
  let backend: RecordingBackend;
  let d: InProcessDaemon;

  const start = (b: RecordingBackend, overrides: ConfigOverrides = {}): Promise<InProcessDaemon> =>
    InProcessDaemon.start(b, overrides, { netns: namespaces });
  const req = (workloadId: string, netnsPath = ns1, ifName = 'eth0'): AttachRequest =>
    attachRequest(workloadId, netnsPath, ifName);

  before(() => {
    ns1 = namespaces.add().path;
    ns2 = namespaces.add().path;
  });
  after(() => namespaces.cleanup());

  beforeEach(async () => {
    backend = new RecordingBackend();
    d = await start(backend);
  });
  afterEach(async () => d.dispose());

  const attach = (r: AttachRequest) => d.client.call(d.client.raw.attach, r);
  const status = () => d.client.status();
  const list = () => d.client.call(d.client.raw.list, {});

  it('attaches a workload and returns an address from the pool', async () => {
    const res = await attach(req('w1'));
    expect(res.ip).to.have.length(1);
    expect([...(res.ip[0] ?? [])].slice(0, 3)).to.deep.equal([10, 77, 0]);
    expect(res.ips[0]?.cidr).to.match(/^10\.77\.0\.\d+\/32$/);
    expect(res.backend).to.equal('recording');
    expect(backend.programmed.has('w1/eth0')).to.equal(true);
  });

  it('returns the same result when Attach is repeated and programs nothing new', async () => {
    const first = await attach(req('w1'));
    const second = await attach(req('w1'));
    expect(second).to.deep.equal(first);
    expect(backend.calls.filter((c) => c.op === 'attach')).to.have.length(1);
    expect((await list()).attachments).to.have.length(1);
  });

  it('fails with ALREADY_EXISTS when the same workload and interface come with another netns', async () => {
    await attach(req('w1', ns1));
    const err = await rejects(attach(req('w1', ns2)));
    expect(codeOf(err)).to.equal('ALREADY_EXISTS');
    expect(err.details).to.include('detach it');
  });

  it('gives a second interface of the same workload its own address', async () => {
    const a = await attach(req('w1', ns1, 'eth0'));
    const b = await attach(req('w1', ns1, 'net1'));
    expect(a.ips[0]?.cidr).to.not.equal(b.ips[0]?.cidr);
  });

  it('succeeds when detaching an unknown workload, an empty netns, or twice', async () => {
    await d.client.call(d.client.raw.detach, { workloadId: 'nobody', netns: undefined });
    await d.client.call(d.client.raw.detach, {
      workloadId: 'nobody',
      netns: { netnsPath: '', ifName: '', mtu: 0 },
    });
    await attach(req('w1'));
    await d.client.call(d.client.raw.detach, {
      workloadId: 'w1',
      netns: { netnsPath: ns1, ifName: 'eth0', mtu: 0 },
    });
    await d.client.call(d.client.raw.detach, {
      workloadId: 'w1',
      netns: { netnsPath: ns1, ifName: 'eth0', mtu: 0 },
    });
    expect((await list()).attachments).to.have.length(0);
    expect(backend.programmed.size).to.equal(0);
  });

  it('releases the addresses on Detach even when dataplane teardown fails', async () => {
    await attach(req('w1'));
    backend.failDetach = new Error('netlink: device busy');
    await d.client.call(d.client.raw.detach, { workloadId: 'w1', netns: undefined });
    const st = await status();
    expect(st.pools[0]?.used).to.equal(0);
    expect((await list()).attachments).to.have.length(0);
  });

  it('rolls back a failed attach: no address held, no row, backend asked to clean up', async () => {
    backend.failAttach = internal('veth creation failed');
    const err = await rejects(attach(req('w1')));
    expect(codeOf(err)).to.equal('INTERNAL');
    expect(err.details).to.include('veth creation failed');
    const st = await status();
    expect(st.pools[0]?.used).to.equal(0);
    expect((await list()).attachments).to.have.length(0);
    expect(backend.calls.map((c) => c.op)).to.deep.equal(['attach', 'detach']);
    backend.failAttach = undefined;
    const ok = await attach(req('w1'));
    expect(ok.ip).to.have.length(1);
  });

  it('passes the backend’s own gRPC code through (UNAVAILABLE stays UNAVAILABLE)', async () => {
    backend.failAttach = unavailable('agent not connected');
    expect(codeOf(await rejects(attach(req('w1'))))).to.equal('UNAVAILABLE');
  });

  it('runs 200 concurrent attaches for different workloads in parallel with distinct addresses', async function () {
    this.timeout(60_000);
    await d.dispose();
    backend = new RecordingBackend();
    backend.attachDelayMs = 5;
    d = await start(backend, { podCidrs: ['10.78.0.0/16'] });
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => attach(req(`c${i}`))));
    const ips = results.map((r) => r.ips[0]?.cidr);
    expect(new Set(ips).size).to.equal(200);
    expect(backend.maxConcurrent).to.be.greaterThan(1);
    expect((await status()).pools[0]?.used).to.equal(200);
  });

  it('serialises calls for the same workload', async () => {
    backend.attachDelayMs = 20;
    const [a, b] = await Promise.all([attach(req('same')), attach(req('same'))]);
    expect(a).to.deep.equal(b);
    expect(backend.calls.filter((c) => c.op === 'attach')).to.have.length(1);
  });

  it('reports RESOURCE_EXHAUSTED and not-ready when the pool is used up, and recovers after a detach', async () => {
    await d.dispose();
    backend = new RecordingBackend();
    // A /29 has 8 addresses: network, broadcast and the node's address leave 5.
    d = await start(backend, { podCidrs: ['10.79.0.0/29'] });
    for (let i = 0; i < 5; i++) await attach(req(`p${i}`));
    const err = await rejects(attach(req('one-too-many')));
    expect(codeOf(err)).to.equal('RESOURCE_EXHAUSTED');
    const st = await status();
    expect(st.ready).to.equal(false);
    expect(st.reasons.join()).to.include('exhausted');
    await d.client.call(d.client.raw.detach, { workloadId: 'p0', netns: undefined });
    expect((await status()).ready).to.equal(true);
    expect((await attach(req('one-too-many'))).ip).to.have.length(1);
  });

  it('is not ready when no pod CIDR is configured, and Attach says why', async () => {
    await d.dispose();
    d = await start(new RecordingBackend(), { podCidrs: [] });
    const st = await status();
    expect(st.ready).to.equal(false);
    expect(st.reasons.join()).to.include('no pod CIDR');
    expect(codeOf(await rejects(attach(req('w1'))))).to.equal('UNAVAILABLE');
  });

  it('is not ready when the backend is unhealthy', async () => {
    backend.healthy = false;
    const st = await status();
    expect(st.ready).to.equal(false);
    expect(st.reasons).to.include('recording backend set unhealthy');
  });

  it('gives one address per family in a dual-stack pool', async () => {
    await d.dispose();
    d = await start(new RecordingBackend(), { podCidrs: ['10.80.0.0/24', 'fd00:80::/64'] });
    const res = await attach(req('w1'));
    expect(res.ip.map((b) => b.length).sort()).to.deep.equal([16, 4]);
    expect(res.ips.map((i) => i.family).sort()).to.deep.equal([4, 6]);
  });

  it('lists, gets and checks attachments', async () => {
    await attach(req('w1'));
    await attach(req('w2'));
    expect((await list()).attachments.map((a) => a.workloadId).sort()).to.deep.equal(['w1', 'w2']);
    const got = await d.client.call(d.client.raw.get, { workloadId: 'w1', ifName: '' });
    expect(got.attachments[0]?.netnsPath).to.equal(ns1);
    expect((await d.client.call(d.client.raw.check, { workloadId: 'w1', ifName: 'eth0' })).ok).to.equal(true);
    backend.programmed.delete('w1/eth0');
    const drift = await d.client.call(d.client.raw.check, { workloadId: 'w1', ifName: 'eth0' });
    expect(drift.ok).to.equal(false);
    expect(drift.drift[0]?.kind).to.equal('interface-missing');
    expect(
      codeOf(await rejects(d.client.call(d.client.raw.get, { workloadId: 'nobody', ifName: '' }))),
    ).to.equal('NOT_FOUND');
  });

  it('GC keeps exactly the named attachments', async () => {
    for (const w of ['a', 'b', 'c']) await attach(req(w));
    const res = await d.client.call(d.client.raw.gc, {
      keep: [{ workloadId: 'b', ifName: '' }],
      namespacesGone: false,
      dryRun: false,
    });
    expect(res.removed.map((r) => r.workloadId).sort()).to.deep.equal(['a', 'c']);
    expect((await list()).attachments.map((a) => a.workloadId)).to.deep.equal(['b']);
  });

  it('keeps attachments and addresses across a restart and reconciles the dataplane', async () => {
    const first = await attach(req('w1'));
    // The "dataplane" lost w1 while the daemon was down, and its namespace still exists: repaired.
    const fresh = new RecordingBackend();
    d = await d.restart(fresh);
    const st = await status();
    expect(st.reconcile?.repaired).to.equal(1);
    expect(fresh.programmed.has('w1/eth0')).to.equal(true);
    expect(await attach(req('w1'))).to.deep.equal(first);
    const other = await attach(req('w2'));
    expect(other.ips[0]?.cidr).to.not.equal(first.ips[0]?.cidr);
  });

  describe('recording an attachment (the row is written while the backend programs)', () => {
    let planning: RecordingBackend;
    beforeEach(async () => {
      await d.dispose();
      planning = new RecordingBackend();
      d = await start(planning);
    });

    it('returns and stores the planned result', async () => {
      const res = await attach(req('w1'));
      const names = (r: { interfaces: Array<{ name: string; mac: string }> }) =>
        r.interfaces.map((i) => `${i.name} ${i.mac}`);
      expect(names(res)).to.include('eth0 02:00:00:00:00:01');
      const got = await d.client.call(d.client.raw.get, { workloadId: 'w1', ifName: '' });
      expect(got.attachments[0]?.result).to.deep.equal(res);
      expect(planning.programmed.has('w1/eth0')).to.equal(true);
    });

    it('hides an attachment from List and Get until its dataplane is programmed', async () => {
      planning.attachDelayMs = 300;
      const pending = attach(req('w1'));
      await new Promise((r) => setTimeout(r, 100));
      expect(planning.calls.map((c) => c.op)).to.deep.equal(['attach']);
      expect((await list()).attachments).to.have.length(0);
      expect(
        codeOf(await rejects(d.client.call(d.client.raw.get, { workloadId: 'w1', ifName: '' }))),
      ).to.equal('NOT_FOUND');
      await pending;
      expect((await list()).attachments.map((a) => a.workloadId)).to.deep.equal(['w1']);
    });

    it('rolls back a failed attach: no row even after a restart, no address held', async () => {
      planning.failAttach = internal('veth creation failed');
      expect(codeOf(await rejects(attach(req('w1'))))).to.equal('INTERNAL');
      expect((await status()).pools[0]?.used).to.equal(0);
      expect(planning.calls.map((c) => c.op)).to.deep.equal(['attach', 'detach']);
      d = await d.restart(new RecordingBackend());
      const st = await status();
      expect(st.attachments).to.equal(0);
      expect(st.pools[0]?.used).to.equal(0);
      expect(st.reconcile?.repaired).to.equal(0);
    });

    it('repairs with the stored plan at restart when the dataplane was lost', async () => {
      const first = await attach(req('w1'));
      const fresh = new RecordingBackend();
      d = await d.restart(fresh);
      expect((await status()).reconcile?.repaired).to.equal(1);
      expect(fresh.plans).to.equal(0);
      expect(await attach(req('w1'))).to.deep.equal(first);
    });

    it('records what the backend reports when it differs from the plan', async () => {
      planning.report = (planned) => ({ ...planned, hostIfName: 'vf7', details: { endpoint: 'vf7' } });
      const res = await attach(req('w1'));
      const fresh = new RecordingBackend();
      d = await d.restart(fresh);
      const stored = [...(await d.daemon.service.list())].find((a) => a.key === 'w1/eth0');
      expect(stored?.dataplane?.hostIfName).to.equal('vf7');
      expect(stored?.dataplane?.details).to.deep.equal({ endpoint: 'vf7' });
      expect(await attach(req('w1'))).to.deep.equal(res);
    });
  });

  describe('bad input is INVALID_ARGUMENT and stores nothing', () => {
    // Whether a path names a namespace a workload may be in is the kernel opener's call (the stand-in
    // opener would refuse any path of its own), so the path cases go to a daemon that opens namespaces
    // through the kernel; the others need a namespace the opener accepts, to fail for their own reason.
    const kernel = recordingDaemon();

    type Opener = 'stand-in' | 'kernel';
    const cases: Array<[string, () => AttachRequest, Opener]> = [
      ['missing netns', () => ({ ...req('w1'), netns: undefined }), 'stand-in'],
      ['empty workload id', () => req(''), 'stand-in'],
      ['oversize workload id', () => req('x'.repeat(300)), 'stand-in'],
      ['workload id with a slash', () => req('a/b'), 'stand-in'],
      ['interface name longer than 15 bytes', () => req('w1', ns1, 'abcdefghijklmnop'), 'stand-in'],
      ['interface name with a slash', () => req('w1', ns1, 'eth/0'), 'stand-in'],
      ['relative netns path', () => req('w1', 'var/run/netns/x'), 'kernel'],
      ['netns path with ..', () => req('w1', '/var/run/netns/../netns/x'), 'kernel'],
      ['/etc/passwd as netns', () => req('w1', '/etc/passwd'), 'kernel'],
      ['a directory as netns', () => req('w1', '/tmp'), 'kernel'],
      ['a missing file as netns', () => req('w1', '/var/run/netns/does-not-exist'), 'kernel'],
      ['a mount namespace', () => req('w1', '/proc/self/ns/mnt'), 'kernel'],
      ["the daemon's own namespace", () => req('w1', '/proc/self/ns/net'), 'kernel'],
      ["PID 1's namespace", () => req('w1', '/proc/1/ns/net'), 'kernel'],
      [
        'an MTU out of range',
        () => ({ ...req('w1'), netns: { netnsPath: ns1, ifName: 'eth0', mtu: 20 } }),
        'stand-in',
      ],
    ];
    for (const [name, make, opener] of cases) {
      it(`rejects ${name}`, async () => {
        const [daemon, dataplane] = opener === 'kernel' ? [kernel.daemon, kernel.backend] : [d, backend];
        const { client } = daemon;
        const err = await rejects(client.call(client.raw.attach, make()));
        expect(codeOf(err), err.details).to.equal('INVALID_ARGUMENT');
        expect(err.details.length).to.be.greaterThan(10);
        expect((await client.call(client.raw.list, {})).attachments).to.have.length(0);
        expect((await client.status()).pools[0]?.used).to.equal(0);
        expect(dataplane.calls).to.have.length(0);
      });
    }
  });
});
