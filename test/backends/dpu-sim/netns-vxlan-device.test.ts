import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { NetnsFabric } from '../../../backends/dpu-sim/netns-fabric';
import { FabricTable } from '../../../backends/dpu-sim/fabric-table';
import { silentLogger } from '../../../core/logger';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { NetlinkSocket } from '../../../lib/rtnetlink';
import { describeRoot } from '../../support/describe-root';
import { NetnsSet, addNodeUplink, ipJson } from '../../support/netns';
import { vtep } from './fabric-objects';

// The simulator's wn-vxlan is the Linux fabric's device (lib/overlay/vxlan-device.ts), so it is ours
// only when it carries our alias: one of our name that another made is refused and left as it is,
// never recreated or deleted. In-process, on one test-owned namespace standing for a DPU's.

const ADDRESS = '10.99.0.1';

interface LinkJson {
  ifname: string;
  ifindex: number;
  ifalias?: string;
  linkinfo?: { info_data?: { id?: number } };
}

describeRoot('simulator fabric device: a wn-vxlan that is not ours', function () {
  this.timeout(30_000);
  const set = new NetnsSet('wnsimdev');
  let ns: { name: string; path: string };
  let handle: NetnsHandle;
  let sock: NetlinkSocket;

  /** wn-vxlan as ip(8) shows it; undefined when there is none. */
  const device = (): LinkJson | undefined => {
    const links = ipJson<LinkJson[]>(ns.name, ['-d', 'link', 'show']);
    return links.find((l) => l.ifname === 'wn-vxlan');
  };

  beforeEach(async () => {
    ns = set.add();
    addNodeUplink(ns.name, ADDRESS);
    const ip = (...args: string[]): void => void execFileSync('ip', ['-n', ns.name, ...args]);
    ip(...'link add wn-vxlan type vxlan id 42 dstport 4790 local'.split(' '), ADDRESS, 'dev', 'up0');
    ip('link', 'set', 'wn-vxlan', 'alias', 'operator tunnel');
    handle = await NetnsHandle.open(ns.path);
    sock = NetlinkSocket.openIn(handle);
  });

  afterEach(async () => {
    await sock.close();
    handle.close();
    set.cleanup();
  });

  it('refuses a LocalVtep while a wn-vxlan of another alias exists, naming it, and leaves that device as it is', async () => {
    const before = device();
    const fabric = await NetnsFabric.open(sock, silentLogger());
    const table = new FabricTable();
    table.set(vtep(1, ADDRESS));
    const [outcome] = await fabric.apply(table, [{ name: 'vtep', kind: 'vtep' }]);
    expect(outcome?.code).to.equal('failed');
    expect(outcome?.message).to.match(
      /an interface named wn-vxlan exists \(vxlan, VNI 42, alias "operator tunnel"\) and is not ours/,
    );
    const after = device();
    expect(after?.ifindex, 'not recreated').to.equal(before?.ifindex);
    expect(after?.ifalias).to.equal('operator tunnel');
    expect(after?.linkinfo?.info_data?.id).to.equal(42);
  });

  it('a LocalVtep deleted leaves a wn-vxlan that is not ours in place', async () => {
    const fabric = await NetnsFabric.open(sock, silentLogger());
    const [outcome] = await fabric.apply(new FabricTable(), [{ name: 'vtep', kind: 'vtep' }]);
    expect(outcome?.code).to.equal('ok');
    expect(device()?.ifalias, 'still there, untouched').to.equal('operator tunnel');
  });
});
