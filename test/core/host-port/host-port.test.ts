import { expect } from 'chai';
import type { AttachmentView, Placement, PlacementRequest } from '../../../core/backend';
import type { ConfigOverrides } from '../../../core/config';
import { unavailable } from '../../../core/errors';
import type { HostPortStatus } from '../../../core/fabric-status';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';
import { waitUntil } from '../../support/wait-until';
import { DpuDataplane } from '../fabric/dpu-recording-dataplane';

// The host port's controller (core/host-port/host-port.ts) in a daemon in this process: a recording
// backend that places ports on DPUs the test names and whose fabric dataplane lists the DPUs carrying
// the fabric, and stand-in namespaces, one of them standing for the host's (no root needed). The
// packets themselves are test/integration/fabric-dpu-host-port.test.ts's.

const KEY = 'workloadnet-host-port/wn-host0';
/** Longer than two of the controller's passes (every 2 s). */
const TWO_PASSES_MS = 4500;

/** Places ports as the test says, on DPUs that carry the fabric or not, some of them away. */
class DpuStandIn extends RecordingBackend {
  readonly fabric = new DpuDataplane();
  /** What the usual placement (no DPU named) picks. */
  placeOn = 'd0';
  readonly carriers = new Set(['d0', 'd1']);
  readonly away = new Set<string>();
  readonly placements: Array<string | undefined> = [];

  place(req: PlacementRequest): Placement {
    this.placements.push(req.dpu);
    const dpu = req.dpu ?? this.placeOn;
    if (this.away.has(dpu)) throw unavailable(`DPU agent ${dpu} is away`);
    return this.carriers.has(dpu) ? { dpu, endpoint: dpu } : { dpu };
  }

  attachmentState(att: AttachmentView): 'ready' | 'degraded' {
    const dpu = this.programmed.get(att.key)?.dpu ?? this.lastDpu.get(att.key);
    return dpu && this.away.has(dpu) ? 'degraded' : 'ready';
  }

  /** The DPU each key was last attached on (kept after its interface goes missing). */
  readonly lastDpu = new Map<string, string>();
  attaches(): number {
    return this.calls.filter((c) => c.op === 'attach' && c.key === KEY).length;
  }
}

const hostPortCalls = (b: DpuStandIn): string[] => b.calls.filter((c) => c.key === KEY).map((c) => c.op);

describe('the host port controller', function () {
  this.timeout(60_000);
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon | undefined;
  let host: { name: string; path: string };

  afterEach(async () => {
    await d?.dispose();
    d = undefined;
  });
  after(() => namespaces.cleanup());

  async function start(backend: DpuStandIn, more: ConfigOverrides = {}): Promise<InProcessDaemon> {
    host = namespaces.add();
    const origAttach = backend.attach.bind(backend);
    backend.attach = async (spec, planned) => {
      if (spec.dpu) backend.lastDpu.set(spec.key, spec.dpu);
      return origAttach(spec, planned);
    };
    d = await InProcessDaemon.start(
      backend,
      { fabric: { mode: 'vxlan' }, linux: { hostNetns: host.path }, ...more },
      { netns: namespaces },
    );
    return d;
  }
  const hostPort = async (): Promise<HostPortStatus | undefined> =>
    (await (d as InProcessDaemon).daemon.service.status()).fabric?.hostPort;
  // Status says attached once the row exists, while its attach may still be programming (Get hides
  // it until then): wait for both.
  const visible = (): Promise<boolean> =>
    (d as InProcessDaemon).daemon.service.get('workloadnet-host-port').then(
      () => true,
      () => false,
    );
  const attached = (): Promise<void> =>
    waitUntil(
      async () => (await hostPort())?.state === 'attached' && (await visible()),
      'host port attached',
      20_000,
      { intervalMs: 50 },
    );

  it('stays pending while no DPU carries the fabric, then attaches the host namespace without a default route', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus([]);
    await start(backend);
    // Until the fabric has started, Status may have no host port yet, or another reason.
    const why = 'no DPU of this node carries the fabric yet';
    await waitUntil(async () => (await hostPort())?.reason === why, 'the reason', 10_000, { intervalMs: 50 });
    expect(await hostPort()).to.include({
      state: 'pending',
      reason: why,
    });
    expect(backend.attaches()).to.equal(0);
    backend.fabric.setDpus(['d0', 'd1']);
    await attached();
    const spec = backend.programmed.get(KEY);
    expect(spec).to.include({
      netnsPath: host.path,
      ifName: 'wn-host0',
      defaultRoute: false,
      dpu: 'd0',
      network: 'default',
    });
    // The static pool source knows no cluster range: the node's own ranges (and its peers', none here).
    expect(spec?.routes).to.deep.equal(['10.77.0.0/24']);
    const st = await hostPort();
    expect(st).to.include({
      state: 'attached',
      dpu: 'd0',
      interface: 'wn-host0',
      netns: host.path,
      reason: '',
    });
    expect(st?.addresses).to.deep.equal(spec?.ips.map((i) => i.address));
    expect(st).to.include({ routeCount: 1 });
    expect(st?.routes).to.deep.equal(['10.77.0.0/24']);
    // Status without the peer rows leaves out its routes too (one per pod range), not their count.
    const brief = (await d!.daemon.service.status({ fabricPeers: false })).fabric?.hostPort;
    expect(brief).to.deep.equal({ ...st, routes: [] });
    const rows = await d!.daemon.service.get('workloadnet-host-port');
    expect(rows[0]).to.include({ origin: 'host-port', defaultRoute: false });
  });

  it('goes to a DPU that carries the fabric when the usual placement picks one that does not', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d1']);
    backend.carriers.delete('d0');
    backend.placeOn = 'v2';
    await start(backend);
    await attached();
    expect(backend.programmed.get(KEY)?.dpu).to.equal('d1');
    expect(backend.placements.slice(0, 2)).to.deep.equal([undefined, 'd1']);
  });

  it('says why when no DPU carrying the fabric can take it, and attaches once one can', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    backend.away.add('d0');
    await start(backend);
    const why = 'none of the DPUs carrying the fabric (d0) can take it: DPU agent d0 is away';
    await waitUntil(async () => (await hostPort())?.reason === why, 'the reason', 10_000, { intervalMs: 50 });
    expect(backend.attaches()).to.equal(0);
    backend.away.delete('d0');
    await attached();
  });

  it('a restart finds it and keeps it: no second attach', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    await start(backend);
    await attached();
    const before = await hostPort();
    d = await d!.restart(backend);
    await attached();
    await new Promise((r) => setTimeout(r, TWO_PASSES_MS));
    expect(backend.attaches(), 'attached once, by the first start').to.equal(1);
    expect(await hostPort()).to.deep.equal(before);
    // Its passes ask only whether its interface is there: a full check reads every route it carries.
    const scopes = backend.checks.filter((c) => c.key === KEY).map((c) => c.scope);
    expect(scopes.length, 'passes checked it').to.be.above(0);
    expect(new Set(scopes)).to.deep.equal(new Set(['presence']));
  });

  it('keeps it while its DPU is away; programs it again in place when its interface is missing with the DPU back', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0', 'd1']);
    await start(backend);
    await attached();
    const before = await hostPort();
    backend.away.add('d0');
    backend.programmed.delete(KEY);
    await new Promise((r) => setTimeout(r, TWO_PASSES_MS));
    expect(backend.attaches(), 'its DPU away: kept').to.equal(1);
    expect((await hostPort())?.reason).to.equal(
      'its DPU d0 is away; the host port stays on it (detach workloadnet-host-port to move it)',
    );
    backend.away.delete('d0');
    await waitUntil(async () => backend.attaches() === 2, 'programmed again', 20_000, { intervalMs: 50 });
    // In place: never detached, the same DPU and address (host-network connections to pods outlive it).
    expect(backend.calls.filter((c) => c.key === KEY).map((c) => c.op)).to.deep.equal(['attach', 'attach']);
    await attached();
    expect(await hostPort()).to.include({ dpu: 'd0' });
    expect((await hostPort())?.addresses).to.deep.equal(before?.addresses);
  });

  it('records the VF a repair in place programmed, in place of the one it replaced', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    await start(backend);
    await attached();
    const rowOf = async () => (await d!.daemon.service.get('workloadnet-host-port'))[0]?.dataplane;
    const before = await rowOf();
    // A rebooted DPU re-created the VF: another netdev, another ifindex.
    backend.report = (planned) => ({
      ...planned,
      hostIfName: 'vf-recreated',
      details: { ...planned.details, endpoint: 'vf-recreated', ifIndex: 4242 },
    });
    backend.programmed.delete(KEY);
    await waitUntil(async () => backend.attaches() === 2, 'programmed again', 20_000, { intervalMs: 50 });
    await waitUntil(async () => (await rowOf())?.hostIfName === 'vf-recreated', 'the new VF recorded', 5000, {
      intervalMs: 50,
    });
    const after = await rowOf();
    expect(after?.details).to.include({ endpoint: 'vf-recreated', ifIndex: 4242 });
    expect(after?.mac, 'the same port').to.equal(before?.mac);
    expect((await hostPort())?.addresses).to.have.length.above(0);
    // A restart reads the row it left: the VF it has now.
    backend.report = undefined;
    d = await d!.restart(backend);
    await attached();
    expect((await rowOf())?.details).to.include({ endpoint: 'vf-recreated', ifIndex: 4242 });
  });

  it("an operator's Detach of it (its DPU gone for good) moves it to a DPU the usual placement picks", async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0', 'd1']);
    await start(backend);
    await attached();
    backend.away.add('d0');
    backend.placeOn = 'd1';
    await d!.daemon.service.detach({ workloadId: 'workloadnet-host-port' });
    await waitUntil(async () => backend.programmed.get(KEY)?.dpu === 'd1', 'on d1', 20_000, {
      intervalMs: 50,
    });
    await attached();
    expect(await hostPort()).to.include({ dpu: 'd1' });
  });

  it('dpu.hostPort false: never attached, and Status says it is off', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    await start(backend, { dpu: { hostPort: false } });
    await new Promise((r) => setTimeout(r, TWO_PASSES_MS));
    expect(backend.attaches()).to.equal(0);
    expect(await hostPort()).to.include({ state: 'off', reason: 'dpu.hostPort is false' });
  });

  it('turned off after it was attached, it stays (as the pods do) and Status says how to remove it', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    await start(backend);
    await attached();
    const dir = d!.dir;
    await d!.stop();
    d = await InProcessDaemon.start(
      backend,
      { fabric: { mode: 'vxlan' }, linux: { hostNetns: host.path }, dpu: { hostPort: false } },
      { netns: namespaces, dir },
    );
    await new Promise((r) => setTimeout(r, TWO_PASSES_MS));
    expect(hostPortCalls(backend)).to.deep.equal(['attach']);
    expect(await hostPort()).to.include({
      state: 'attached',
      reason:
        'dpu.hostPort is false; attached earlier, it stays until detached (detach workloadnet-host-port)',
    });
  });

  it('there is none without the fabric', async () => {
    const backend = new DpuStandIn();
    backend.fabric.setDpus(['d0']);
    await start(backend, { fabric: { mode: 'off' } });
    await new Promise((r) => setTimeout(r, TWO_PASSES_MS));
    expect(backend.attaches()).to.equal(0);
    expect(await hostPort()).to.equal(undefined);
  });
});
