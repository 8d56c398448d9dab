import { expect } from 'chai';
import * as fs from 'node:fs';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { WorkloadNetError } from '../../../core/errors';
import { planAttachment, randomMac } from '../../../backends/linux/attach-plan';
import { resolveLinuxBackendOptions } from '../../../backends/linux/linux-backend-options';
import { NetlinkThread } from '../../../backends/linux/netlink-thread';
import { NetlinkError } from '../../../lib/rtnetlink';
import { ip, ipJson } from '../../support/netns-fixture';
import { NetnsSet, netnsPath } from '../../support/netns';

// The netlink thread on its own: one attach's exchange per message, its failures carried back with
// their class, step and errno, and a clean stop. (The backend's suite covers it inside attach.)
describe('netlink thread', function () {
  this.timeout(30_000);
  const pool = new NetnsSet('wnl-');
  const opts = resolveLinuxBackendOptions({});
  let nodeName: string;
  let node: NetnsHandle;
  let thread: NetlinkThread;
  const deaths: string[] = [];

  before(async () => {
    nodeName = pool.addNode('10.250.0.1').name;
    node = await NetnsHandle.open(netnsPath(nodeName));
    thread = await NetlinkThread.start(node, (why) => deaths.push(why));
  });

  after(async () => {
    await thread?.stop();
    node?.close();
    pool.cleanup();
  });

  function openSockets(): number {
    return fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:');
      } catch {
        return false;
      }
    }).length;
  }

  async function job(name: string, address: string) {
    const ns = await NetnsHandle.open(netnsPath(name));
    const plan = planAttachment(
      {
        key: `${name}/eth0`,
        ifName: 'eth0',
        mtu: 1500,
        ips: [{ family: 4, address, gateway: '169.254.1.1' }],
      },
      opts,
    );
    return {
      ns,
      plan,
      job: { plan, mac: randomMac(), netnsFd: ns.fd, netnsPath: ns.path, netnsInode: ns.inode },
    };
  }

  it('runs a whole attach: the pair, both sides and the alias, and reports where the time went', async () => {
    const w = pool.add('thr').name;
    const { ns, plan, job: j } = await job(w, '10.251.3.2');
    try {
      const r = await thread.attach(j);
      expect(r.ok, String(!r.ok && r.error)).to.equal(true);
      const [eth0] = await ipJson<{ ifindex: number; address: string }>(w, 'link', 'show', 'dev', 'eth0');
      expect(eth0?.address).to.equal(j.mac);
      const [host] = await ipJson<{ ifindex: number; ifalias?: string }>(
        nodeName,
        'link',
        'show',
        'dev',
        plan.hostName,
      );
      expect(host?.ifalias).to.equal(plan.alias);
      expect(r.ok && r.pair).to.deep.equal({ hostIndex: host?.ifindex, peerIndex: eth0?.ifindex });
      expect(Object.values(r.times).every((t) => t > 0)).to.equal(true);
    } finally {
      ns.close();
    }
  });

  it('carries a kernel failure back as a NetlinkError with its step, and the pair to roll back', async () => {
    const w = pool.add('thr-taken').name;
    await ip('-n', w, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0');
    const { ns, job: j } = await job(w, '10.251.3.3');
    try {
      const r = await thread.attach(j);
      expect(r.ok).to.equal(false);
      if (r.ok) return;
      expect(r.step).to.equal('veth');
      expect(r.error).to.be.instanceOf(NetlinkError);
      expect((r.error as NetlinkError).code).to.equal('EEXIST');
      expect(r.pair).to.equal(undefined);
    } finally {
      ns.close();
    }
  });

  it('refuses attaches once stopped, closes its host socket, and was never reported dead', async () => {
    const own = await NetlinkThread.start(node);
    const socketsBefore = openSockets();
    await own.stop();
    expect(own.alive).to.equal(false);
    // Its host socket is the one socket it holds (its event loop's own fds are not sockets).
    expect(openSockets()).to.equal(socketsBefore - 1);
    const w = pool.add('thr-late').name;
    const { ns, job: j } = await job(w, '10.251.3.4');
    try {
      const r = await own.attach(j);
      expect(r.ok).to.equal(false);
      expect(!r.ok && r.error).to.be.instanceOf(WorkloadNetError);
      expect(!r.ok && (r.error as WorkloadNetError).code).to.equal('UNAVAILABLE');
      expect(await ipJson(w, 'link', 'show', 'dev', 'eth0').catch(() => [])).to.deep.equal([]);
    } finally {
      ns.close();
    }
    expect(deaths).to.deep.equal([]);
  });
});
