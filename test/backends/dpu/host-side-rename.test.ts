import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { silentLogger } from '../../../core/logger';
import { createHostSide, type HostSide } from '../../../backends/dpu/host-side';
import { returnName } from '../../../backends/dpu/vf-return';
import { NetnsSet, ipJson, isRoot, type TestNamespace } from '../../support/netns';

// The host side returns an endpoint by its recorded identity (index and MAC), whatever has become of
// the name it came with: a DPU that rebooted re-creates its VFs under names of its choosing, so that
// name may be another port's VF by the time a port is detached.

const describeRoot = isRoot ? describe : describe.skip;

const M1 = '02:aa:00:00:00:01';
const M2 = '02:aa:00:00:00:02';

interface LinkRow {
  ifname: string;
  ifindex: number;
  address: string;
}

const links = (ns: string): LinkRow[] => ipJson<LinkRow[]>(ns, ['link', 'show']);
const byMac = (ns: string, mac: string): LinkRow[] => links(ns).filter((l) => l.address === mac);
const ip = (...args: string[]): void => void execFileSync('ip', args);
/** A "VF": one end of a veth pair (the other end, its representor, beside it), carrying `mac`. */
const vf = (ns: string, name: string, rep: string, mac: string): void =>
  ip('-n', ns, 'link', 'add', name, 'address', mac, 'type', 'veth', 'peer', 'name', rep);
const inode = (ns: TestNamespace): number => fs.statSync(ns.path).ino;

describeRoot(
  `returning an endpoint whose name another link holds${isRoot ? '' : ' (skipped: needs root)'}`,
  () => {
    const nets = new NetnsSet('wn-hsr-');
    let host: TestNamespace;
    let side: HostSide;

    beforeEach(() => {
      host = nets.add('host');
      ip('-n', host.name, 'link', 'set', 'lo', 'up');
      side = createHostSide(host.path, [], silentLogger());
    });

    afterEach(async () => {
      await side.close();
      nets.cleanup();
    });

    /** Where an endpoint sits: the namespace (by path and inode) and its name there. */
    const placedAt = (ns: TestNamespace, ifName: string) => ({
      netnsPath: ns.path,
      netnsInode: inode(ns),
      ifName,
    });
    const placement = (ns: TestNamespace, ifName: string) => ({
      ...placedAt(ns, ifName),
      mtu: 1500,
      ips: [{ family: 4 as const, address: '10.9.0.2', gateway: '169.254.1.1' }],
    });

    it("returns a workload's endpoint under a name of its own when the host gave its name to another VF", async () => {
      const pod = nets.add('pod');
      vf(host.name, 'vfa', 'rpa', M1);
      const { ifIndex } = await side.plumb({ ...placement(pod, 'eth0'), endpoint: 'vfa', mac: M1 });
      // The DPU re-created its VFs meanwhile; another port's VF is called vfa now.
      vf(host.name, 'vfa', 'rpb', M2);
      await side.unplumb({ ...placedAt(pod, 'eth0'), endpoint: 'vfa', mac: M1, ifIndex });
      expect(byMac(pod.name, M1), 'nothing left in the workload').to.deep.equal([]);
      const ours = byMac(host.name, M1);
      expect(ours.map((l) => l.ifname)).to.deep.equal([returnName(ifIndex)]);
      expect(
        byMac(host.name, M2).map((l) => l.ifname),
        'the other VF keeps its name',
      ).to.deep.equal(['vfa']);
    });

    it("leaves alone the host port's re-created VF, which nobody moved in, when its old name is another VF's", async () => {
      vf(host.name, 'vfa', 'rpa', M1);
      const { ifIndex } = await side.plumb({ ...placement(host, 'wn-host0'), endpoint: 'vfa', mac: M1 });
      expect(links(host.name).find((l) => l.ifindex === ifIndex)?.ifname).to.equal('wn-host0');
      // A reboot of the DPU: the VF goes, and comes back as vfb; vfa is another port's now.
      ip('-n', host.name, 'link', 'del', 'wn-host0');
      vf(host.name, 'vfb', 'rpc', M1);
      vf(host.name, 'vfa', 'rpd', M2);
      await side.unplumb({ ...placedAt(host, 'wn-host0'), endpoint: 'vfa', mac: M1, ifIndex });
      expect(byMac(host.name, M1).map((l) => l.ifname)).to.deep.equal(['vfb']);
      expect(byMac(host.name, M2).map((l) => l.ifname)).to.deep.equal(['vfa']);
    });
  },
);
