import { expect } from 'chai';
import type { DpuBackend } from '../../backends/dpu';
import { LinuxFabric } from '../../backends/linux/fabric/linux-fabric';
import type { Peer } from '../../core/peer-source';
import { vtepMac } from '../../lib/vtep-mac';
import { attachTo, testSpec } from '../support/attach-spec';
import { describeRoot } from '../support/describe-root';
import { netnsPath } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { fabricAck, v3Hello } from '../backends/dpu/fabric-stream';
import { removeDir, scratchDir, startBackend } from '../support/dpu-fixtures';
import { RawAgent } from '../support/raw-agent';
import { ackEveryFabricObject } from '../support/acking-agent';
import { FabricTopology, kernelState, settings, type BareNode } from '../support/fabric-topology';
import { netnsInode } from '../support/netns-fixture';
import { SimulatedDpu } from '../support/simulated-dpu';

// A rogue DPU agent (a gRPC client built from the project's protos) shadows node r0: it connects to
// node n1's daemon stating r0's underlay address as its uplink, leaves, and comes back with another
// address, while n1's own DPU A (the simulator in netns mode, a real kernel VXLAN device) reboots in
// between. A's pod must reach r0's pod (a Linux-backend node) throughout: the rogue is refused as a
// carrier while r0 holds the address, and A's FDB entry for r0 is never given to it. n1's name sorts
// before r0's, so that a snapshot listing both the rogue's endpoint and r0 names the rogue first.

const SLICE = '10.244.1.0/24';
const POD_IP = '10.244.1.5';
const ROGUE_RETURNS_AT = '10.100.1.99';

describeRoot(
  'DPU fabric: an agent stating another node’s address cannot take its traffic (root)',
  function () {
    this.timeout(180_000);
    const topo = new FabricTopology();
    let dir: string;
    let n1: BareNode;
    let dpuA: SimulatedDpu;
    let backend: DpuBackend | undefined;
    let linux: LinuxFabric | undefined;
    let rogue: RawAgent | undefined;
    let pod: string;
    let r0Peer: Peer;

    /** A rogue that acks every fabric object it is sent, as a well-behaved agent would. */
    function connectRogue(address: string): RawAgent {
      const a = new RawAgent(dpuA.socket);
      a.send(v3Hello('dpu-rogue', { uplinkAddresses: [address], bootId: `boot-rogue-${address}` }));
      a.keepAlive(100);
      ackEveryFabricObject(a, fabricAck);
      return a;
    }

    const r0 = (): ReturnType<FabricTopology['node']> => topo.node('r0');
    const reachesR0 = (): Promise<boolean> =>
      pings(pod, r0().podIp, { count: 3, intervalSeconds: 0.2, waitSeconds: 2 });
    const heldByA = (name: string) => dpuA.objects().find((o) => o.name === name);
    const fdbOfA = async (): Promise<string[]> => (await kernelState(dpuA.ns)).fdb;
    const r0Fdb = (): string => `${vtepMac(r0().address)} dst ${r0().address} self permanent`;

    before(async () => {
      dir = scratchDir();
      await topo.build([{ name: 'r0', subnet: 1, host: 10, podRange: 3 }]);
      n1 = await topo.addBareNode({ name: 'n1', subnet: 1, host: 1 });
      dpuA = await SimulatedDpu.add(topo, 1, { name: 'dpu-a', host: 11 }, { ns: n1.ns, dir });
      backend = await startBackend(dir, { hostNetnsPath: netnsPath(n1.ns), nodeName: 'n1' });
      await dpuA.connect('boot-1');
      await backend.fabric.prepare(settings('vxlan'));
      pod = topo.pool.add('pa').name;
      await attachTo(
        backend,
        testSpec(
          'pa',
          { path: netnsPath(pod), inode: netnsInode(pod) },
          [{ family: 4, address: POD_IP, gateway: '169.254.1.1' }],
          { mtu: 1450 },
        ),
      );
      // r0 runs the host fabric and takes DPU A as n1's endpoint; n1 takes r0 from its peer table.
      linux = new LinuxFabric({ hostNetnsPath: netnsPath(r0().ns), monitor: false });
      const local = await linux.prepare(settings('vxlan'));
      const toA = { mac: vtepMac(dpuA.address), vni: 30574, port: 4789 };
      await linux.apply([
        { node: 'n1', underlay: [dpuA.address], mtu: 1500, vtep: toA, bootId: '', prefixes: [SLICE] },
      ]);
      r0Peer = {
        node: 'r0',
        underlay: [r0().address],
        mtu: 1500,
        vtep: local.vtep,
        bootId: '',
        prefixes: [r0().prefix],
      };
      await backend.fabric.apply([r0Peer], { ranges: [SLICE], byEndpoint: new Map([['dpu-a', [SLICE]]]) });
      await waitUntil(() => backend!.fabric.report().ready, 'n1 fabric ready', 30_000, { intervalMs: 100 });
    });

    after(async () => {
      rogue?.close();
      await dpuA?.stop();
      await backend?.stop();
      await linux?.stop();
      await topo.cleanup();
      removeDir(dir);
    });

    it("keeps A's pods reaching r0 across a rogue's arrival, its departure, A's reboot and its return elsewhere", async () => {
      expect(await reachesR0(), 'pa → r0 before the rogue').to.equal(true);

      // Arrival: the rogue states r0's underlay address.
      rogue = connectRogue(r0().address);
      await rogue.next((m) => !!m.syncComplete, "the rogue's snapshot");
      await waitUntil(
        async () => (await backend!.health()).dpus?.some((d) => d.id === 'dpu-rogue' && d.fabric) === true,
        "the rogue's row",
      );
      expect(await reachesR0(), 'pa → r0 with the rogue connected').to.equal(true);
      const row = (await backend!.health()).dpus?.find((d) => d.id === 'dpu-rogue')?.fabric;
      expect(row?.carries, 'the rogue does not carry the fabric').to.equal(false);
      expect(row?.note).to.include(`its uplink address ${r0().address} is node r0's underlay address`);
      expect(heldByA('peer/n1/dpu-rogue'), 'A is told nothing of it').to.equal(undefined);

      // Departure, then A reboots (a new boot id: its tables start empty and take the whole snapshot).
      rogue.close();
      await dpuA.stop('SIGKILL');
      await dpuA.connect('boot-2');
      await waitUntil(
        async () => heldByA('peer/r0') !== undefined && (await fdbOfA()).includes(r0Fdb()),
        "A's FDB entry for r0 after its reboot",
        30_000,
        { intervalMs: 200 },
      );
      // A's reboot re-creates pa's port after the snapshot too: the pod may be cut off for a moment
      // while its port comes back, but never for good (a lost FDB entry stays lost).
      await waitUntil(reachesR0, 'pa → r0 after the rogue left and A rebooted', 20_000, { intervalMs: 200 });

      // Return at another address: nothing holds it, so the rogue now carries the fabric; r0 keeps its entry.
      rogue = connectRogue(ROGUE_RETURNS_AT);
      await waitUntil(
        () => heldByA('peer/n1/dpu-rogue')?.peer?.address === ROGUE_RETURNS_AT,
        "the rogue's new endpoint on A",
        30_000,
        { intervalMs: 100 },
      );
      expect(await reachesR0(), 'pa → r0 after the rogue came back elsewhere').to.equal(true);
      expect(await fdbOfA(), "A's FDB").to.include.members([
        r0Fdb(),
        `${vtepMac(ROGUE_RETURNS_AT)} dst ${ROGUE_RETURNS_AT} self permanent`,
      ]);
      await waitUntil(() => backend!.fabric.report().ready, 'ready once A and the rogue acked', 30_000, {
        intervalMs: 100,
      });
      const r0Path = backend!.fabric.report().peers.find((p) => p.node === 'r0');
      expect(r0Path?.path).to.equal('vxlan');
      expect(r0Path?.seenBy?.find((s) => s.endpoint === 'dpu-a')?.reachable, "A's word on r0").to.equal(true);
    });
  },
);
