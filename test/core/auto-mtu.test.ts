import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { effectiveConfig } from '../../cli/daemon-command';
import type { AttachSpec, Backend, Placement, PlacementRequest } from '../../core/backend';
import { AUTO_MTU, DEFAULT_CONFIG, type ConfigOverrides } from '../../core/config';
import { effectiveNetworks } from '../../core/ipam/effective-networks';
import { loadConfigFile } from '../../core/daemon/config-file';
import { mergeConfig } from '../../core/daemon/config-check';
import { WorkloadNetError } from '../../core/errors';
import type { FabricStatus } from '../../core/fabric-status';
import { InProcessDaemon } from '../support/in-process-daemon';
import { RecordingBackend } from '../support/recording-backend';
import { StandInNamespaces } from '../support/stand-in-netns';
import { waitUntil } from '../support/wait-until';
import { DpuDataplane, dpu } from './fabric/dpu-recording-dataplane';
import { RecordingFabricDataplane } from '../support/recording-fabric-dataplane';

// An MTU left unset is "auto": with the fabric on, a new interface gets what the fabric carries (the
// uplink's MTU less the encapsulation), learnt when the fabric's dataplane is prepared; with it off,
// 1500. A set MTU, even 1500, is kept exactly. A daemon in this process with a recording backend whose
// fabric dataplane reports the uplink the test chooses, and stand-in namespaces (no root needed).

describe('pod MTU: auto vs explicit', function () {
  this.timeout(60_000);

  describe('config', () => {
    const merged = (o: ConfigOverrides) => mergeConfig(DEFAULT_CONFIG, o);

    it('leaves the MTU unset (auto) by default, and keeps 1500 or 9000 when given', () => {
      expect(DEFAULT_CONFIG.mtu).to.equal(AUTO_MTU);
      expect(effectiveNetworks(merged({}))[0]?.mtu).to.equal(AUTO_MTU);
      expect(effectiveNetworks(merged({ mtu: 1500 }))[0]?.mtu).to.equal(1500);
      expect(effectiveNetworks(merged({ mtu: 9000 }))[0]?.mtu).to.equal(9000);
    });

    it('reads "auto" and 0 from a file, for the daemon and for a network; a network without one takes the daemon’s', () => {
      const dir = fs.mkdtempSync(path.join(InProcessDaemon.tempDir(), 'cfg-'));
      const file = path.join(dir, 'config.json');
      fs.writeFileSync(
        file,
        JSON.stringify({
          mtu: 'auto',
          networks: [
            { name: 'default', backend: 'linux', podCidrs: ['10.1.0.0/16'] },
            { name: 'jumbo', backend: 'linux', podCidrs: ['10.2.0.0/16'], mtu: 9000 },
            { name: 'follow', backend: 'linux', podCidrs: ['10.3.0.0/16'], mtu: 'auto' },
            { name: 'std', backend: 'linux', podCidrs: ['10.4.0.0/16'], mtu: 1500 },
          ],
        }),
      );
      const c = mergeConfig(DEFAULT_CONFIG, loadConfigFile(file));
      expect(effectiveNetworks(c).map((n) => [n.name, n.mtu])).to.deep.equal([
        ['default', 0],
        ['jumbo', 9000],
        ['follow', 0],
        ['std', 1500],
      ]);
      fs.writeFileSync(file, JSON.stringify({ mtu: 1500, networks: [] }));
      expect(mergeConfig(DEFAULT_CONFIG, loadConfigFile(file)).mtu).to.equal(1500);
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('takes --mtu auto, --mtu 0 and --mtu 1500 from the command line', () => {
      expect(effectiveConfig({ mtu: 'auto' }).mtu).to.equal(AUTO_MTU);
      expect(effectiveConfig({ mtu: '0' }).mtu).to.equal(AUTO_MTU);
      expect(effectiveConfig({ mtu: '1500' }).mtu).to.equal(1500);
      expect(effectiveConfig({}).mtu).to.equal(AUTO_MTU);
      expect(() => effectiveConfig({ mtu: 'big' })).to.throw(
        /--mtu must be "auto" \(or 0\) or a whole number in 68\.\.65535, not "big"/,
      );
    });

    it('refuses an MTU that is neither auto nor 68..65535, naming both', () => {
      for (const mtu of [67, 65536, 1500.5, -1])
        expect(() => merged({ mtu }))
          .to.throw(WorkloadNetError)
          .with.property('message')
          .that.includes(`mtu must be 0 (auto) or an integer in 68..65535, not ${mtu}`);
      expect(() => merged({ mtu: 'big' as unknown as number })).to.throw(/mtu must be 0 \(auto\)/);
      expect(() =>
        merged({ networks: [{ name: 'default', backend: 'linux', podCidrs: ['10.1.0.0/16'], mtu: 40 }] }),
      ).to.throw(/network "default": mtu must be 0 \(auto\) or an integer in 68..65535, not 40/);
    });
  });

  describe('an in-process daemon with a fabric dataplane', () => {
    const namespaces = new StandInNamespaces();
    let d: InProcessDaemon | undefined;

    /** A backend whose fabric dataplane reports the uplink the test sets. */
    class FabricBackend extends RecordingBackend {
      readonly fabric = new RecordingFabricDataplane();
      constructor(uplinkMtu: number, underlay = '192.0.2.1') {
        super();
        this.fabric.local = { ...this.fabric.local, mtu: uplinkMtu, underlay: [underlay] };
      }
    }

    afterEach(async () => {
      await d?.dispose();
      d = undefined;
    });
    after(() => namespaces.cleanup());

    const start = (b: Backend, overrides: ConfigOverrides): Promise<InProcessDaemon> =>
      InProcessDaemon.start(b, overrides, { netns: namespaces });
    const service = () => (d as InProcessDaemon).daemon.service;
    async function attach(id: string, mtu?: number): Promise<number> {
      const a = await service().attach({
        workloadId: id,
        netnsPath: namespaces.add().path,
        ifName: 'eth0',
        ...(mtu === undefined ? {} : { mtu }),
      });
      return a.mtu;
    }
    const fabric = async (): Promise<FabricStatus> => (await service().status()).fabric as FabricStatus;

    it('gives a new pod the fabric’s pod MTU: uplink 1500, VXLAN over IPv4 → 1450', async () => {
      const backend = new FabricBackend(1500);
      d = await start(backend, { fabric: { mode: 'vxlan' } });
      expect(await attach('w1')).to.equal(1450);
      // What the backend was asked to program, and what Status says a new interface gets.
      expect((backend.programmed.get('w1/eth0') as AttachSpec).mtu).to.equal(1450);
      expect((await service().status()).networks?.[0]?.mtu).to.equal(1450);
      // A call's own MTU is kept, and counted when above what the fabric carries.
      expect(await attach('w2', 9000)).to.equal(9000);
      await waitUntil(
        async () =>
          (await fabric()).warnings.includes(
            'network default: 1 attachment(s) run with a larger MTU than the vxlan fabric carries (1450); their large packets to other nodes are dropped until they are attached again',
          ),
        'the attachment above the fabric’s MTU counted',
      );
      await service().detach({ workloadId: 'w2', ifName: 'eth0' });
      expect((await fabric()).warnings).to.deep.equal([]);
    });

    it('follows the mode and the underlay: routed carries the uplink’s, VXLAN over IPv6 70 bytes less', async () => {
      d = await start(new FabricBackend(9000), { fabric: { mode: 'routed' } });
      expect(await attach('w1')).to.equal(9000);
      await d.dispose();
      d = await InProcessDaemon.start(
        new FabricBackend(1500, 'fd00::1'),
        { fabric: { mode: 'hybrid' } },
        {
          netns: namespaces,
        },
      );
      expect(await attach('w1')).to.equal(1430);
    });

    it('keeps an explicit MTU exactly — 1500 too — and still warns when it is too big', async () => {
      const backend = new FabricBackend(1500);
      d = await start(backend, { mtu: 1500, fabric: { mode: 'vxlan' } });
      expect(await attach('w1')).to.equal(1500);
      const st = await fabric();
      expect(st.warnings).to.deep.equal([
        'network default: mtu 1500 is larger than the vxlan fabric carries (1450); set its mtu to 1450 or less, or to 0 (auto)',
        'network default: 1 attachment(s) run with a larger MTU than the vxlan fabric carries (1450); their large packets to other nodes are dropped until they are attached again',
      ]);
      await d.dispose();
      d = await start(new FabricBackend(1500), { mtu: 9000 });
      expect(await attach('w1'), 'explicit, fabric off').to.equal(9000);
    });

    it('gives 1500 with the fabric off', async () => {
      d = await start(new FabricBackend(9000), {});
      expect(await attach('w1')).to.equal(1500);
      expect((await service().status()).networks?.[0]?.mtu).to.equal(1500);
    });

    it('does not wait for a fabric that cannot be prepared: 1500 less the encapsulation meanwhile', async () => {
      const backend = new FabricBackend(9000);
      backend.fabric.prepareError = new Error('no default route to find the node address');
      d = await start(backend, { fabric: { mode: 'vxlan' } });
      expect((await fabric()).reasons[0]).to.include('fabric dataplane not prepared');
      expect(await attach('w1')).to.equal(1450);
      await d.dispose();
      const v6 = new FabricBackend(9000);
      v6.fabric.prepareError = new Error('no route');
      d = await start(v6, { fabric: { mode: 'vxlan', nodeIp: 'fd00::1' } });
      expect(await attach('w1'), 'an IPv6 node address: 70 bytes').to.equal(1430);
    });

    it('applies a changed uplink MTU to new pods only; existing ones keep theirs and are counted when too big', async () => {
      d = await start(new FabricBackend(9000), { fabric: { mode: 'vxlan' } });
      expect(await attach('w1')).to.equal(8950);
      expect(await attach('w2')).to.equal(8950);
      d = await d.restart(new FabricBackend(1500));
      expect(await attach('w3')).to.equal(1450);
      const rows = [...(await service().list())].map((a) => [a.workloadId, a.mtu]);
      expect(rows).to.deep.equal([
        ['w1', 8950],
        ['w2', 8950],
        ['w3', 1450],
      ]);
      await waitUntil(
        async () =>
          (await fabric()).warnings.includes(
            'network default: 2 attachment(s) run with a larger MTU than the vxlan fabric carries (1450); their large packets to other nodes are dropped until they are attached again',
          ),
        'the two restored attachments counted',
      );
    });

    it('with DPUs: a pod placed on a DPU gets that DPU’s overlay MTU', async () => {
      class PlacingBackend extends RecordingBackend {
        readonly fabric = new DpuDataplane();
        placeOn = 'dpu-1';
        place(_req: PlacementRequest): Placement {
          return { dpu: this.placeOn, endpoint: this.placeOn };
        }
      }
      const backend = new PlacingBackend();
      backend.fabric.setEndpoints([
        { ...dpu('dpu-1', 1), mtu: 9000 },
        { ...dpu('dpu-2', 2), mtu: 1500 },
      ]);
      d = await start(backend, { fabric: { mode: 'vxlan' } });
      expect(await attach('w1')).to.equal(8950);
      backend.placeOn = 'dpu-2';
      expect(await attach('w2')).to.equal(1450);
      expect((await service().status()).networks?.[0]?.mtu, 'not placed: the smallest').to.equal(1450);
    });
  });
});
