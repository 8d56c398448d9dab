import { expect } from 'chai';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { AttachmentView, BackendHealth, DataplaneResult, IpAssignment } from '../../../core/backend';
import { hostLinkName } from '../../../backends/linux/host-link-name';
import { ip, ipJson, netnsExec, netnsInode } from '../../support/netns-fixture';
import { netnsPath, type IpLink } from '../../support/netns';
import { linuxBackendNode } from '../../support/linux-backend-node';
import { attachTo, testSpec, type TestSpec } from '../../support/attach-spec';
import { rejection } from '../../support/expect-error';
import { pings } from '../../support/ping';

// Integration tests against the real kernel. The "host" side is a test-owned node namespace with an
// uplink (10.250.0.1/32); workloads get namespaces beside it. Nothing touches the machine's own
// network namespace.

const GROUP = 0x776e;
const DETACH_GROUP = 0x776f;

interface IpAddr {
  ifname: string;
  addr_info: Array<{ family: string; local: string; prefixlen: number }>;
}
interface IpRoute {
  dst: string;
  gateway?: string;
  dev: string;
  scope?: string;
}

function v4(address: string): IpAssignment {
  return { family: 4, address, gateway: '169.254.1.1' };
}
function v6(address: string): IpAssignment {
  return { family: 6, address, gateway: 'fe80::1' };
}

/** The addresses `ip -j addr show` lists (it also lists filtered-out entries as empty objects). */
function ipv6Addresses(addrs: IpAddr[]): string[] {
  return (addrs[0]?.addr_info ?? [])
    .filter((x) => x.local !== undefined)
    .map((x) => `${x.local}/${x.prefixlen}`);
}

function specFor(
  ns: string,
  ips: IpAssignment[],
  opts: { ifName?: string; mtu?: number; workloadId?: string } = {},
): TestSpec {
  return testSpec(opts.workloadId ?? `${ns}-wl`, { path: netnsPath(ns), inode: netnsInode(ns) }, ips, {
    ifName: opts.ifName ?? 'eth0',
    mtu: opts.mtu ?? 1500,
  });
}

function viewOf(spec: TestSpec, dataplane?: DataplaneResult): AttachmentView {
  return { ...spec, dataplane };
}

async function groupLinks(node: string, group = GROUP): Promise<IpLink[]> {
  // `ip -j` also lists filtered-out links as empty objects.
  return (await ipJson<IpLink>(node, 'link', 'show', 'group', String(group))).filter(
    (l) => l.ifname !== undefined,
  );
}

describe('LinuxBackend (routed veth, real kernel)', function () {
  this.timeout(60_000);
  let other: string;
  const kernel = linuxBackendNode({
    prefix: 'wnl-',
    address: '10.250.0.1',
    backend: { ipv6: true },
    // Made before start(), forwarding off: a new one copies the machine's (devconf_inherit_init_net).
    beforeStart: async (pool) => {
      other = pool.add('fwd').name;
      await netnsExec(other, 'sh', '-c', 'echo 0 > /proc/sys/net/ipv4/ip_forward');
    },
  });

  /** A new workload namespace named for `role`, attached with `address` by the suite's backend. */
  async function attachNew(
    role: string,
    address: string,
  ): Promise<{ w: string; spec: TestSpec; res: DataplaneResult }> {
    const w = kernel.pool.add(role).name;
    const spec = specFor(w, [v4(address)]);
    return { w, spec, res: await attachTo(kernel.backend, spec) };
  }

  describe('start', () => {
    it('enables IPv4 and IPv6 forwarding in the host namespace only', async () => {
      const inNode = await netnsExec(
        kernel.node,
        'cat',
        '/proc/sys/net/ipv4/ip_forward',
        '/proc/sys/net/ipv6/conf/all/forwarding',
      );
      expect(inNode.split('\n').filter(Boolean)).to.deep.equal(['1', '1']);
      expect((await netnsExec(other, 'cat', '/proc/sys/net/ipv4/ip_forward')).trim()).to.equal('0');
    });

    it('fails with one clear line when the process is not privileged', async () => {
      const script = `
        const { LinuxBackend } = require(${JSON.stringify(path.resolve(__dirname, '../../../backends/linux/linux-backend.js'))});
        new LinuxBackend({}).start().then(() => console.log('STARTED'), (e) => console.log(e.code + ' ' + e.message));`;
      // Runs inside the node namespace as nobody: its "own" namespace is the test's, never the machine's.
      const { stdout } = await promisify(execFile)(
        'ip',
        [
          'netns',
          'exec',
          kernel.node,
          'setpriv',
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          process.execPath,
          '-e',
          script,
        ],
        { encoding: 'utf8' },
      );
      expect(stdout.trim().split('\n')).to.have.length(1);
      expect(stdout.trim()).to.match(
        /^FAILED_PRECONDITION linux backend: permission denied .*run workloadnetd as root or with CAP_NET_ADMIN/,
      );
    });
  });

  describe('attach', () => {
    let w1: string;
    let w2: string;
    let s1: TestSpec;
    let s2: TestSpec;
    let r1: DataplaneResult;
    let r2: DataplaneResult;

    before(async () => {
      w1 = kernel.pool.add('w1').name;
      w2 = kernel.pool.add('w2').name;
      s1 = specFor(w1, [v4('10.251.0.2')], { mtu: 1450 });
      s2 = specFor(w2, [v4('10.251.0.3')], { mtu: 1450 });
      r1 = await attachTo(kernel.backend, s1);
      r2 = await attachTo(kernel.backend, s2);
    });

    it('creates the workload end inside the namespace under the requested name, up, with the explicit MTU', async () => {
      const links = await ipJson<IpLink>(w1, 'link', 'show');
      const eth0 = links.find((l) => l.ifname === 'eth0');
      expect(eth0, 'eth0 in the workload namespace').to.not.equal(undefined);
      expect(eth0!.mtu).to.equal(1450);
      expect(eth0!.flags).to.include('UP');
      expect(eth0!.address).to.equal(r1.mac);
      expect(links.find((l) => l.ifname === 'lo')?.flags).to.include('UP');
      expect(r1).to.include({ ifName: 'eth0', mtu: 1450, hostIfName: hostLinkName(s1.key) });
    });

    it('gives both ends one transmit and one receive queue', async () => {
      // Asked for in the create: the kernel's default (one per CPU, cut down to one) costs two RCU waits.
      type Queues = { ifname: string; num_tx_queues: number; num_rx_queues: number };
      const [peer] = await ipJson<Queues>(w1, '-d', 'link', 'show', 'dev', 'eth0');
      const [host] = await ipJson<Queues>(kernel.node, '-d', 'link', 'show', 'dev', r1.hostIfName ?? '');
      for (const end of [peer, host]) expect(end).to.include({ num_tx_queues: 1, num_rx_queues: 1 });
    });

    it('gives the workload a /32 and routes via the link-local gateway', async () => {
      const addrs = await ipJson<IpAddr>(w1, '-4', 'addr', 'show', 'dev', 'eth0');
      expect(addrs[0]?.addr_info.map((a) => `${a.local}/${a.prefixlen}`)).to.deep.equal(['10.251.0.2/32']);
      const routes = await ipJson<IpRoute>(w1, '-4', 'route', 'show');
      expect(
        routes.map((r) => ({ dst: r.dst, gateway: r.gateway, dev: r.dev, scope: r.scope })),
      ).to.have.deep.members([
        { dst: 'default', gateway: '169.254.1.1', dev: 'eth0', scope: undefined },
        { dst: '169.254.1.1', gateway: undefined, dev: 'eth0', scope: 'link' },
      ]);
      expect(r1.routes).to.deep.equal([
        { destination: '169.254.1.1/32' },
        { destination: '0.0.0.0/0', gateway: '169.254.1.1' },
      ]);
    });

    it('programs the host end: up, link group, alias naming the workload, proxy ARP, forwarding, /32 route', async () => {
      const [host] = await ipJson<IpLink>(kernel.node, 'link', 'show', 'dev', r1.hostIfName!);
      expect(host).to.include({
        mtu: 1450,
        group: String(GROUP),
        ifalias: `workloadnet:${s1.key}`,
      });
      expect(host!.flags).to.include('UP');
      const conf = await netnsExec(
        kernel.node,
        'cat',
        `/proc/sys/net/ipv4/conf/${r1.hostIfName}/proxy_arp`,
        `/proc/sys/net/ipv4/conf/${r1.hostIfName}/forwarding`,
      );
      expect(conf.split('\n').filter(Boolean)).to.deep.equal(['1', '1']);
      const routes = await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', '10.251.0.2');
      expect(routes.map((r) => [r.dst, r.dev, r.scope])).to.deep.equal([
        ['10.251.0.2', r1.hostIfName, 'link'],
      ]);
      expect((await groupLinks(kernel.node)).map((l) => l.ifname)).to.include.members([
        r1.hostIfName,
        r2.hostIfName,
      ]);
    });

    it('gives an IPv4-only link no IPv6 link-local address on either end', async () => {
      // backends/interface/link-local.ts. The dual-stack test below sees the kernel's own fe80:: address
      // on an interface with IPv6 addresses, the same way.
      const ends: Array<[string, string]> = [
        [w1, 'eth0'],
        [kernel.node, r1.hostIfName!],
      ];
      for (const [ns, dev] of ends) {
        const addrs = await ipJson<IpAddr>(ns, '-6', 'addr', 'show', 'dev', dev);
        expect(ipv6Addresses(addrs), `${dev} in ${ns}`).to.deep.equal([]);
        const mode = await netnsExec(ns, 'cat', `/proc/sys/net/ipv6/conf/${dev}/addr_gen_mode`);
        expect(mode.trim(), `addr_gen_mode of ${dev}`).to.equal('1');
      }
    });

    it('attaches an IPv4-only link whose MTU is below IPv6 minimum, which has no IPv6 settings', async () => {
      const w = kernel.pool.add('small-mtu').name;
      const spec = specFor(w, [v4('10.251.0.40')], { mtu: 1200 });
      const res = await attachTo(kernel.backend, spec);
      const [link] = await ipJson<IpLink>(w, 'link', 'show', 'dev', 'eth0');
      expect(link?.mtu).to.equal(1200);
      expect(await pings(w, '10.250.0.1'), 'small-mtu → node').to.equal(true);
      expect(await kernel.backend.check(viewOf(spec, res))).to.deep.equal([]);
      await kernel.backend.detach(viewOf(spec, res));
    });

    it('carries traffic between workloads and between a workload and the node', async () => {
      expect(await pings(w1, '10.251.0.3'), 'w1 → w2').to.equal(true);
      expect(await pings(w2, '10.251.0.2'), 'w2 → w1').to.equal(true);
      expect(await pings(w1, '10.250.0.1'), 'w1 → node').to.equal(true);
      expect(await pings(kernel.node, '10.251.0.2'), 'node → w1').to.equal(true);
    });

    it('reports no drift for a healthy attachment', async () => {
      expect(await kernel.backend.check(viewOf(s1, r1))).to.deep.equal([]);
    });

    it('reports a missing address after the workload interface was flushed', async () => {
      await ip('-n', w2, 'addr', 'flush', 'dev', 'eth0');
      const drift = await kernel.backend.check(viewOf(s2, r2));
      expect(drift.map((d) => d.kind)).to.include('address-missing');
      expect(drift.find((d) => d.kind === 'address-missing')?.message).to.contain('10.251.0.3/32');
    });

    it('reports changed MTU and missing routes', async () => {
      await ip('-n', w2, 'link', 'set', 'eth0', 'mtu', '1300');
      await ip('-n', w2, 'route', 'flush', 'dev', 'eth0');
      const kinds = (await kernel.backend.check(viewOf(s2, r2))).map((d) => d.kind);
      expect(kinds).to.include.members(['mtu-changed', 'route-missing']);
    });

    it('reports a missing host link and workload interface once the pair is gone', async () => {
      await ip('-n', kernel.node, 'link', 'del', r2.hostIfName!);
      const kinds = (await kernel.backend.check(viewOf(s2, r2))).map((d) => d.kind);
      expect(kinds).to.include.members(['host-link-missing', 'interface-missing']);
    });

    it('detaches twice without error and removes the pair and the host route', async () => {
      await kernel.backend.detach(viewOf(s1, r1));
      await kernel.backend.detach(viewOf(s1, r1));
      expect((await groupLinks(kernel.node)).map((l) => l.ifname)).to.not.include(r1.hostIfName);
      expect(await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', '10.251.0.2')).to.deep.equal([]);
      expect((await ipJson<IpLink>(w1, 'link', 'show')).map((l) => l.ifname)).to.deep.equal(['lo']);
    });
  });

  describe('dual stack', () => {
    it('adds /128 addresses, a default via fe80::1, fe80::1/64 on the host end, and carries IPv6 traffic', async () => {
      const a = kernel.pool.add('d1').name;
      const b = kernel.pool.add('d2').name;
      const sa = specFor(a, [v4('10.251.0.12'), v6('fd00:77:1::12')]);
      const sb = specFor(b, [v4('10.251.0.13'), v6('fd00:77:1::13')]);
      const [ra, rb] = await Promise.all([attachTo(kernel.backend, sa), attachTo(kernel.backend, sb)]);
      const addrs = await ipJson<IpAddr>(a, '-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'global');
      // `ip -j` also lists filtered-out entries as empty objects.
      const global = addrs[0]?.addr_info.filter((x) => x.local !== undefined);
      expect(global?.map((x) => `${x.local}/${x.prefixlen}`)).to.deep.equal(['fd00:77:1::12/128']);
      const def = await ipJson<IpRoute>(a, '-6', 'route', 'show', 'default');
      expect(def.map((r) => [r.gateway, r.dev])).to.deep.equal([['fe80::1', 'eth0']]);
      const hostAddrs = await ipJson<IpAddr>(kernel.node, '-6', 'addr', 'show', 'dev', ra.hostIfName!);
      expect(hostAddrs[0]?.addr_info.map((x) => `${x.local}/${x.prefixlen}`)).to.include('fe80::1/64');
      // With IPv6 addresses the workload keeps the kernel's own link-local address.
      const linkLocal = await ipJson<IpAddr>(a, '-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'link');
      expect(ipv6Addresses(linkLocal).filter((x) => x.startsWith('fe80:'))).to.have.lengthOf(1);
      const hostRoutes = await ipJson<IpRoute>(kernel.node, '-6', 'route', 'show', 'fd00:77:1::12');
      expect(hostRoutes.map((r) => r.dev)).to.deep.equal([ra.hostIfName]);
      expect(ra.routes).to.deep.include({ destination: '::/0', gateway: 'fe80::1' });
      expect(await pings(a, 'fd00:77:1::13'), 'IPv6 a → b').to.equal(true);
      expect(await pings(b, '10.251.0.12'), 'IPv4 b → a').to.equal(true);
      expect(await kernel.backend.check(viewOf(sa, ra))).to.deep.equal([]);
      await Promise.all([kernel.backend.detach(viewOf(sa, ra)), kernel.backend.detach(viewOf(sb, rb))]);
    });
  });

  describe('detach', () => {
    it('succeeds after the workload namespace was deleted and leaves no host link', async () => {
      const { w, spec, res } = await attachNew('gone', '10.251.0.20');
      kernel.pool.remove(w);
      await kernel.backend.detach(viewOf(spec, res));
      expect((await groupLinks(kernel.node)).map((l) => l.ifname)).to.not.include(res.hostIfName);
      expect(await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', '10.251.0.20')).to.deep.equal([]);
    });

    it('succeeds for an attachment that never finished', async () => {
      const w = kernel.pool.add('half').name;
      await kernel.backend.detach(viewOf(specFor(w, [v4('10.251.0.21')])));
    });

    it('deletes concurrent detaches through the detaching group, both ends, and leaves the group empty', async () => {
      const names = kernel.pool.addMany(12, 'grp').map((ns) => ns.name);
      const specs = names.map((n, i) => specFor(n, [v4(`10.251.2.${i + 2}`)]));
      const results = await Promise.all(specs.map((s) => attachTo(kernel.backend, s)));
      await Promise.all(specs.map((s, i) => kernel.backend.detach(viewOf(s, results[i]))));
      const left = (await groupLinks(kernel.node)).map((l) => l.ifname);
      for (const r of results) expect(left).to.not.include(r.hostIfName);
      expect(await groupLinks(kernel.node, DETACH_GROUP)).to.deep.equal([]);
      for (const n of names)
        expect(await ipJson<IpLink>(n, 'link', 'show', 'dev', 'eth0').catch(() => [])).to.deep.equal([]);
    });

    it('deletes its own link when the detaching group cannot be deleted, and leaves the foreign interface', async () => {
      const { spec, res } = await attachNew('stuck', '10.251.0.22');
      // Loopback cannot be deleted, so a group delete that would include it fails as a whole.
      await ip('-n', kernel.node, 'link', 'set', 'lo', 'group', String(DETACH_GROUP));
      try {
        await kernel.backend.detach(viewOf(spec, res));
        expect((await groupLinks(kernel.node, DETACH_GROUP)).map((l) => l.ifname)).to.deep.equal(['lo']);
        expect((await groupLinks(kernel.node)).map((l) => l.ifname)).to.not.include(res.hostIfName);
      } finally {
        await ip('-n', kernel.node, 'link', 'set', 'lo', 'group', 'default');
      }
    });
  });

  describe('bad input', () => {
    let tmp: string;
    before(() => {
      tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wnl-bad-'));
    });
    after(() => fs.rmSync(tmp, { recursive: true, force: true }));

    async function expectRefused(spec: TestSpec, code: string, text: RegExp): Promise<void> {
      const before = (await groupLinks(kernel.node)).map((l) => l.ifname);
      const err = await rejection(attachTo(kernel.backend, spec));
      expect(err.code).to.equal(code);
      expect(err.message).to.match(text);
      expect((await groupLinks(kernel.node)).map((l) => l.ifname)).to.deep.equal(
        before,
        'no host link left behind',
      );
    }

    function specAt(p: string): TestSpec {
      return { ...specFor(kernel.node, [v4('10.251.0.30')]), netnsPath: p, netnsInode: fs.statSync(p).ino };
    }

    it('refuses the host namespace', async () => {
      await expectRefused(specAt(netnsPath(kernel.node)), 'INVALID_ARGUMENT', /host network namespace/);
    });

    it('refuses an interface name that already exists in the namespace and leaves nothing behind', async () => {
      const w = kernel.pool.add('taken').name;
      await ip('-n', w, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'other0');
      const before = (await ipJson<IpLink>(w, 'link', 'show')).map((l) => l.ifname).sort();
      await expectRefused(
        specFor(w, [v4('10.251.0.32')]),
        'ALREADY_EXISTS',
        /interface "eth0" already exists in network namespace/,
      );
      expect((await ipJson<IpLink>(w, 'link', 'show')).map((l) => l.ifname).sort()).to.deep.equal(before);
      expect(await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', '10.251.0.32')).to.deep.equal([]);
    });

    it('rolls back the veth pair when a later step fails', async () => {
      const w = kernel.pool.add('noipv6').name;
      // With IPv6 disabled in the workload namespace the IPv6 address cannot be added.
      await netnsExec(w, 'sh', '-c', 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6');
      await expectRefused(
        specFor(w, [v4('10.251.0.33'), v6('fd00:77:1::33')]),
        'FAILED_PRECONDITION',
        /configuring eth0 in .*RTM_NEWADDR failed: EACCES/,
      );
      expect((await ipJson<IpLink>(w, 'link', 'show')).map((l) => l.ifname)).to.deep.equal(['lo']);
      expect(await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', '10.251.0.33')).to.deep.equal([]);
    });
  });

  describe('leftovers and reconcile', () => {
    it('replaces a leftover host link of an earlier attempt that crashed', async () => {
      const w = kernel.pool.add('retry').name;
      const spec = specFor(w, [v4('10.251.0.40')]);
      const name = hostLinkName(spec.key);
      await ip(
        '-n',
        kernel.node,
        'link',
        'add',
        name,
        'group',
        String(GROUP),
        'type',
        'veth',
        'peer',
        'name',
        'stale0',
      );
      const res = await attachTo(kernel.backend, spec);
      const [host] = await ipJson<IpLink>(kernel.node, 'link', 'show', 'dev', name);
      expect(host?.ifalias, 'the new link replaced the leftover').to.equal(`workloadnet:${spec.key}`);
      expect((await ipJson<IpLink>(kernel.node, 'link', 'show')).map((l) => l.ifname)).to.not.include(
        'stale0',
      );
      expect(await pings(w, '10.250.0.1')).to.equal(true);
      await kernel.backend.detach(viewOf(spec, res));
    });

    it('removes orphan host links of its group, reports missing ones, and leaves other links alone', async () => {
      // A second backend with its own group in the same node namespace: it must not touch the first's links.
      await kernel.withAnother({ linkGroup: GROUP + 2, detachGroup: GROUP + 3 }, async (other) => {
        const keep = kernel.pool.add('keep').name;
        const orphan = kernel.pool.add('orphan').name;
        const sKeep = specFor(keep, [v4('10.251.0.50')]);
        const sOrphan = specFor(orphan, [v4('10.251.0.51')]);
        const sMissing = specFor(kernel.pool.add('missing').name, [v4('10.251.0.52')]);
        const sFirst = specFor(kernel.pool.add('first').name, [v4('10.251.0.53')]);
        const rFirst = await attachTo(kernel.backend, sFirst);
        const rKeep = await attachTo(other, sKeep);
        const rOrphan = await attachTo(other, sOrphan);
        const started = process.hrtime.bigint();
        const outcome = await other.reconcile([viewOf(sKeep, rKeep), viewOf(sMissing)]);
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        expect(outcome.orphansRemoved).to.have.length(1);
        expect(outcome.orphansRemoved[0])
          .to.contain(rOrphan.hostIfName)
          .and.contain(`workloadnet:${sOrphan.key}`);
        expect(outcome.missing).to.deep.equal([sMissing.key]);
        expect(outcome.healthy).to.deep.equal([sKeep.key]);
        const left = (await groupLinks(kernel.node, GROUP + 2)).map((l) => l.ifname);
        expect(left).to.deep.equal([rKeep.hostIfName]);
        expect(
          (await groupLinks(kernel.node)).map((l) => l.ifname),
          "the first backend's link stays",
        ).to.include(rFirst.hostIfName);
        expect(
          await ipJson<IpLink>(kernel.node, 'link', 'show', 'dev', 'up0'),
          'the uplink stays',
        ).to.have.length(1);
        expect(ms, 'one dump and one delete').to.be.below(1000);
        await other.detach(viewOf(sKeep, rKeep));
        await kernel.backend.detach(viewOf(sFirst, rFirst));
      });
    });
  });

  describe('an attach cut short', () => {
    it('leaves a host link without its alias, which reconcile reports missing and a repair replaces', async () => {
      const { spec, res } = await attachNew('half-done', '10.251.0.61');
      // The alias is written last; without it the attachment may be half configured.
      await ip('-n', kernel.node, 'link', 'set', 'dev', res.hostIfName ?? '', 'alias', '');
      const outcome = await kernel.backend.reconcile([viewOf(spec, res)]);
      expect(outcome.missing).to.deep.equal([spec.key]);
      expect(outcome.healthy).to.deep.equal([]);
      const again = await attachTo(kernel.backend, spec, res);
      expect(again.mac).to.equal(res.mac);
      const [link] = await ipJson<IpLink>(kernel.node, 'link', 'show', 'dev', res.hostIfName ?? '');
      expect(link?.ifalias).to.equal(`workloadnet:${spec.key}`);
      expect(await kernel.backend.check(viewOf(spec, again))).to.deep.equal([]);
      await kernel.backend.detach(viewOf(spec, again));
    });
  });

  describe('a detach cut short', () => {
    it('leaves its link in the detaching group, which reconcile deletes and reports the attachment missing', async () => {
      const { spec, res } = await attachNew('cut', '10.251.0.60');
      // What a crash right after detach's first step leaves behind.
      await ip('-n', kernel.node, 'link', 'set', res.hostIfName ?? '', 'down', 'group', String(DETACH_GROUP));
      const outcome = await kernel.backend.reconcile([viewOf(spec, res)]);
      expect(outcome.orphansRemoved.join()).to.contain(res.hostIfName);
      expect(outcome.missing).to.deep.equal([spec.key]);
      expect(await groupLinks(kernel.node, DETACH_GROUP)).to.deep.equal([]);
    });
  });

  describe('health', () => {
    it('is ready while netlink answers and forwarding is on, and says why when forwarding is off', async () => {
      expect(await kernel.backend.health()).to.deep.include({ ready: true, reasons: [] });
      await netnsExec(kernel.node, 'sh', '-c', 'echo 0 > /proc/sys/net/ipv4/ip_forward');
      // Health is served from a probe at most a second old, so the change shows within ~2 s.
      const settled = async (ready: boolean): Promise<BackendHealth> => {
        for (let i = 0; ; i++) {
          const h = await kernel.backend.health();
          if (h.ready === ready || i >= 40) return h;
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      const h = await settled(false);
      expect(h.ready).to.equal(false);
      expect(h.reasons.join('\n')).to.match(/net\.ipv4\.ip_forward is 0/);
      await kernel.backend.start();
      expect((await settled(true)).ready).to.equal(true);
    });
  });

  describe('concurrency', () => {
    it('attaches 20 workloads into 20 namespaces concurrently', async () => {
      const names = kernel.pool.addMany(20, 'par').map((ns) => ns.name);
      const specs = names.map((n, i) => specFor(n, [v4(`10.251.1.${i + 2}`)]));
      const results = await Promise.all(specs.map((s) => attachTo(kernel.backend, s)));
      expect(new Set(results.map((r) => r.hostIfName)).size).to.equal(20);
      const hostRoutes = await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', 'root', '10.251.1.0/24');
      expect(hostRoutes.map((r) => r.dst).sort()).to.deep.equal(specs.map((s) => s.ips[0]!.address).sort());
      for (const [i, n] of names.entries()) {
        const addrs = await ipJson<IpAddr>(n, '-4', 'addr', 'show', 'dev', 'eth0');
        expect(addrs[0]?.addr_info[0]?.local, n).to.equal(`10.251.1.${i + 2}`);
      }
      expect(await pings(names[0]!, '10.251.1.21')).to.equal(true);
      await Promise.all(specs.map((s, i) => kernel.backend.detach(viewOf(s, results[i]))));
      expect(
        await ipJson<IpRoute>(kernel.node, '-4', 'route', 'show', 'root', '10.251.1.0/24'),
      ).to.deep.equal([]);
    });
  });

  describe('with linux.ipv6LinkLocal', () => {
    it('keeps the kernel IPv6 link-local address on both ends of an IPv4-only link', async () => {
      await kernel.withAnother({ ipv6LinkLocal: true }, async (other) => {
        const w = kernel.pool.add('keep-ll').name;
        const spec = specFor(w, [v4('10.251.2.10')]);
        const res = await attachTo(other, spec);
        for (const [ns, dev] of [
          [w, 'eth0'],
          [kernel.node, res.hostIfName ?? ''],
        ] as const) {
          const addrs = ipv6Addresses(await ipJson<IpAddr>(ns, '-6', 'addr', 'show', 'dev', dev));
          expect(
            addrs.filter((a) => a.startsWith('fe80:')),
            `${dev} in ${ns}`,
          ).to.have.lengthOf(1);
          const mode = await netnsExec(ns, 'cat', `/proc/sys/net/ipv6/conf/${dev}/addr_gen_mode`);
          expect(mode.trim(), `addr_gen_mode of ${dev}`).to.not.equal('1');
        }
        expect(await pings(w, '10.250.0.1')).to.equal(true);
        expect(await other.check(viewOf(spec, res))).to.deep.equal([]);
        await other.detach(viewOf(spec, res));
      });
    });
  });

  describe('without the netlink thread', () => {
    it('programs the same attachment through the threadpool, and rolls back the same way', async () => {
      await kernel.withAnother({ netlinkThread: false }, async (other) => {
        const w = kernel.pool.add('pool-path').name;
        const spec = specFor(w, [v4('10.251.2.2')]);
        const res = await attachTo(other, spec);
        expect(await other.check(viewOf(spec, res))).to.deep.equal([]);
        const [host] = await ipJson<IpLink>(kernel.node, 'link', 'show', 'dev', res.hostIfName ?? '');
        expect(host?.ifalias).to.equal(`workloadnet:${spec.key}`);
        expect(await pings(w, '10.250.0.1')).to.equal(true);
        await other.detach(viewOf(spec, res));
        const bad = kernel.pool.add('pool-path-bad').name;
        await netnsExec(bad, 'sh', '-c', 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6');
        const err = await rejection(attachTo(other, specFor(bad, [v4('10.251.2.3'), v6('fd00:77:1::3')])));
        expect(err.message).to.match(/configuring eth0 in .*RTM_NEWADDR failed: EACCES/);
        expect((await ipJson<IpLink>(bad, 'link', 'show')).map((l) => l.ifname)).to.deep.equal(['lo']);
      });
    });
  });
});
