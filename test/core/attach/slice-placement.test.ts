import { expect } from 'chai';
import type { AttachSpec, Placement, PlacementRequest } from '../../../core/backend';
import type { ConfigOverrides } from '../../../core/config';
import { WorkloadNetError } from '../../../core/errors';
import type { FabricStatus } from '../../../core/fabric-status';
import { rejection } from '../../support/expect-error';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';
import { waitUntil } from '../../support/wait-until';
import { DpuDataplane } from '../fabric/dpu-recording-dataplane';

// The attach flow with a backend that places ports on DPUs: placement first, then the address from
// the slice of the DPU chosen, borrowed when that slice is full, and all of it rebuilt by a restart.
// A daemon in this process with a recording backend and stand-in namespaces (no root needed).

/** A backend with DPUs: it places each port where the test says, and its fabric lists two DPUs. */
class PlacingBackend extends RecordingBackend {
  readonly placements: PlacementRequest[] = [];
  readonly fabric = new DpuDataplane();
  placeOn = 'dpu-2';

  constructor() {
    super();
    this.fabric.local = { ...this.fabric.local, endpoints: [] };
  }

  place(req: PlacementRequest): Placement {
    this.placements.push(req);
    return { dpu: this.placeOn, endpoint: this.placeOn };
  }
}

const CONFIG: ConfigOverrides = {
  podCidrs: ['10.77.0.0/28'],
  fabric: { mode: 'vxlan' },
  dpu: { fabricSlices: 4 },
};

describe('attach with DPU slices (recording backend, stand-in namespaces, no root needed)', function () {
  this.timeout(60_000);
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon | undefined;
  let backend: PlacingBackend;

  afterEach(async () => {
    await d?.dispose();
    d = undefined;
  });
  after(() => namespaces.cleanup());

  async function start(overrides: ConfigOverrides = {}): Promise<InProcessDaemon> {
    backend = new PlacingBackend();
    backend.fabric.setDpus(['dpu-1', 'dpu-2']);
    d = await InProcessDaemon.start(backend, { ...CONFIG, ...overrides }, { netns: namespaces });
    await waitUntil(async () => (await fabric()).endpoints?.length === 2, 'both DPUs published with slices');
    return d;
  }

  async function fabric(): Promise<FabricStatus> {
    const st = await (d as InProcessDaemon).daemon.service.status();
    return st.fabric as FabricStatus;
  }

  async function attach(id: string): Promise<string> {
    const a = await (d as InProcessDaemon).daemon.service.attach({
      workloadId: id,
      netnsPath: namespaces.add().path,
      ifName: 'eth0',
    });
    return a.ips[0]?.address as string;
  }

  const prefixesOf = async (id: string): Promise<string[] | undefined> =>
    (await fabric()).endpoints?.find((e) => e.id === id)?.prefixes;

  it('places the port first, then takes its address from that DPU’s slice and hands the DPU to attach', async () => {
    await start();
    expect(await prefixesOf('dpu-2')).to.deep.equal(['10.77.0.4/30']);
    expect(await attach('w1')).to.equal('10.77.0.4');
    expect(backend.placements).to.deep.equal([
      { workloadId: 'w1', ifName: 'eth0', network: 'default', dpu: undefined, dpuPort: undefined },
    ]);
    expect((backend.programmed.get('w1/eth0') as AttachSpec).dpu).to.equal('dpu-2');
    backend.placeOn = 'dpu-1';
    expect(await attach('w2')).to.equal('10.77.0.2');
  });

  it('borrows when the slice is full, shows it in Status, and rebuilds it after a restart', async () => {
    await start();
    for (let i = 0; i < 4; i++) await attach(`w${i}`);
    const borrowed = await attach('w4');
    expect(borrowed).to.not.match(/^10\.77\.0\.[4-7]$/);
    await waitUntil(async () => (await fabric()).borrowed === 1, 'the borrow counted');
    expect(await prefixesOf('dpu-2')).to.deep.equal(['10.77.0.4/30', `${borrowed}/32`]);
    await waitUntil(
      () => backend.fabric.owns.at(-1)?.byEndpoint.get('dpu-2')?.length === 2,
      'the borrow applied to the dataplane',
    );

    const dir = (d as InProcessDaemon).dir;
    await (d as InProcessDaemon).stop();
    backend = new PlacingBackend();
    backend.fabric.setDpus(['dpu-2', 'dpu-1']);
    d = await InProcessDaemon.start(backend, CONFIG, { netns: namespaces, dir });
    await waitUntil(async () => (await fabric()).borrowed === 1, 'the borrow rebuilt after a restart');
    expect(await prefixesOf('dpu-2'), 'dpu-2 keeps its slice though listed first now').to.deep.equal([
      '10.77.0.4/30',
      `${borrowed}/32`,
    ]);
    expect(await prefixesOf('dpu-1')).to.deep.equal(['10.77.0.0/30']);

    await d.daemon.service.detach({ workloadId: 'w4', ifName: 'eth0' });
    await waitUntil(async () => (await fabric()).borrowed === 0, 'the borrow released by the detach');
    expect(await prefixesOf('dpu-2')).to.deep.equal(['10.77.0.4/30']);
  });

  it('a failed attach gives its borrowed address back and out of the DPU’s prefixes', async () => {
    await start();
    for (let i = 0; i < 4; i++) await attach(`w${i}`);
    backend.failAttach = new WorkloadNetError('UNAVAILABLE', 'agent away');
    await rejection(attach('w4'), 'UNAVAILABLE');
    expect((await fabric()).borrowed).to.equal(0);
    expect(await prefixesOf('dpu-2')).to.deep.equal(['10.77.0.4/30']);
  });

  it('with fabric.strictSlices refuses with RESOURCE_EXHAUSTED naming the DPU and slice, holding nothing', async () => {
    await start({ fabric: { mode: 'vxlan', strictSlices: true } });
    for (let i = 0; i < 4; i++) await attach(`w${i}`);
    const err = await rejection(attach('w4'), 'RESOURCE_EXHAUSTED');
    expect(err.message).to.include('slice 1 of DPU dpu-2 (10.77.0.4/30)');
    const st = await (d as InProcessDaemon).daemon.service.status();
    expect(st.pools.map((p) => p.used)).to.deep.equal([4]);
    expect(st.attachments).to.equal(4);
    expect(st.fabric?.borrowed).to.equal(0);
  });
});
