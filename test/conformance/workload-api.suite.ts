import { expect } from 'chai';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { ApiClient } from '../../cli/api-client';
import type { AttachRequest, AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { attachRequest } from '../support/attach-request';
import { addNodeUplink, ipJson, NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { pings } from '../support/ping';

// One workload-API conformance suite that every backend must pass: the same calls, the same answers,
// real traffic between workloads. A target starts "its" daemon (and whatever else it needs, such as a
// DPU agent) with the host side inside a test-owned node namespace.

export interface TargetHandle {
  client: ApiClient;
  stop(): Promise<void>;
}

export interface ConformanceTarget {
  name: string;
  /** The node namespace already exists (with lo up and an uplink 10.250.0.1/32); start the daemon in it. */
  start(ctx: { nodeNetns: string; dir: string; podCidr: string }): Promise<TargetHandle>;
  /** Whether workloads can reach an address of the node namespace itself. */
  nodeTraffic: boolean;
}

export const NODE_ADDRESS = '10.250.0.1';

function linkNames(netns: string): string[] {
  return ipJson<Array<{ ifname: string }>>(netns, ['link', 'show'])
    .map((l) => l.ifname)
    .sort();
}

function addressOf(res: AttachResponse): string {
  return (res.ips.find((i) => i.family === 4)?.cidr ?? '').split('/')[0] ?? '';
}

export function conformanceSuite(target: ConformanceTarget): void {
  describeRoot(`workload API conformance: ${target.name} backend (root, test-owned namespaces)`, function () {
    this.timeout(60_000);
    const namespaces = new NetnsSet('wnk-');
    let node: string;
    let dir: string;
    let handle: TargetHandle;
    const sleepers: ChildProcess[] = [];

    const attach = (r: AttachRequest) => handle.client.call(handle.client.raw.attach, r);
    const detach = (workloadId: string, netnsPath = '', ifName = 'eth0') =>
      handle.client.call(handle.client.raw.detach, {
        workloadId,
        netns: { netnsPath, ifName, mtu: 0 },
      });
    const req = (workloadId: string, netnsPath: string, ifName = 'eth0'): AttachRequest =>
      attachRequest(workloadId, netnsPath, ifName);

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-conf-'));
      node = namespaces.add().name;
      addNodeUplink(node, NODE_ADDRESS);
      handle = await target.start({ nodeNetns: node, dir, podCidr: '10.251.0.0/24' });
    });

    after(async () => {
      for (const s of sleepers) s.kill('SIGKILL');
      await handle?.stop();
      namespaces.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('gives two workloads their addresses and default routes, visible in the kernel', async () => {
      const w1 = namespaces.add();
      const w2 = namespaces.add();
      const r1 = await attach(req('conf-a1', w1.path));
      const r2 = await attach(req('conf-a2', w2.path));
      for (const [w, r] of [
        [w1, r1],
        [w2, r2],
      ] as const) {
        const addrs = ipJson<
          Array<{ addr_info: Array<{ local: string; prefixlen: number; family: string }> }>
        >(w.name, ['addr', 'show', 'dev', 'eth0']);
        const v4 = addrs[0]?.addr_info.filter((a) => a.family === 'inet') ?? [];
        expect(v4.map((a) => `${a.local}/${a.prefixlen}`)).to.deep.equal([`${addressOf(r)}/32`]);
        const routes = ipJson<Array<{ dst: string; gateway?: string }>>(w.name, ['route', 'show']);
        expect(routes.find((x) => x.dst === 'default')?.gateway).to.equal('169.254.1.1');
      }
      expect(await pings(w1.name, addressOf(r2)), 'workload 1 -> workload 2').to.equal(true);
      expect(await pings(w2.name, addressOf(r1)), 'workload 2 -> workload 1').to.equal(true);
      if (target.nodeTraffic) expect(await pings(w1.name, NODE_ADDRESS), 'workload -> node').to.equal(true);
    });

    /** The IPv4 routes of a namespace, as ip(8) shows them. */
    const routesIn = (netns: string) =>
      ipJson<Array<{ dst: string; gateway?: string; dev: string; metric?: number }>>(netns, [
        '-4',
        'route',
        'show',
      ]);
    const v4On = (netns: string, dev: string): string[] =>
      ipJson<Array<{ addr_info: Array<{ local: string; family: string }> }>>(netns, [
        'addr',
        'show',
        'dev',
        dev,
      ])
        .flatMap((l) => l.addr_info)
        .filter((a) => a.family === 'inet')
        .map((a) => a.local);

    it('attaches a second interface of one workload: both addressed, one default route, traffic on both, detach one keeps the other', async () => {
      const w = namespaces.add();
      const peer = namespaces.add();
      const r0 = await attach(req('conf-multi', w.path, 'eth0'));
      const r1 = await attach(req('conf-multi', w.path, 'net1'));
      const rp = await attach(req('conf-multi-peer', peer.path));
      expect(v4On(w.name, 'eth0')).to.deep.equal([addressOf(r0)]);
      expect(v4On(w.name, 'net1')).to.deep.equal([addressOf(r1)]);
      expect(addressOf(r1)).to.not.equal(addressOf(r0));
      const routes = routesIn(w.name);
      const defaults = routes.filter((r) => r.dst === 'default');
      expect(
        defaults.map((r) => r.dev),
        'one default route, on the first interface',
      ).to.deep.equal(['eth0']);
      expect(
        routes.some((r) => r.dst === '10.251.0.0/24' && r.dev === 'net1' && r.gateway === '169.254.1.1'),
        'the network range through net1',
      ).to.equal(true);
      expect(r1.routes.map((r) => r.destination)).to.not.include('0.0.0.0/0');
      expect(await pings(w.name, addressOf(rp), { from: 'eth0' }), 'eth0 -> peer').to.equal(true);
      expect(await pings(w.name, addressOf(rp), { from: 'net1' }), 'net1 -> peer').to.equal(true);
      expect(await pings(peer.name, addressOf(r1)), 'peer -> net1').to.equal(true);
      await detach('conf-multi', w.path, 'eth0');
      expect(linkNames(w.name)).to.not.include('eth0');
      expect(v4On(w.name, 'net1')).to.deep.equal([addressOf(r1)]);
      expect(await pings(w.name, addressOf(rp), { from: 'net1' }), 'net1 -> peer after eth0 left').to.equal(
        true,
      );
      expect(await pings(peer.name, addressOf(r1)), 'peer -> net1 after eth0 left').to.equal(true);
      const left = await handle.client.call(handle.client.raw.get, { workloadId: 'conf-multi', ifName: '' });
      expect(left.attachments.map((a) => a.ifName)).to.deep.equal(['net1']);
      await detach('conf-multi', w.path, 'net1');
      await detach('conf-multi-peer', peer.path);
    });

    it('attaches two workloads sharing one namespace under different interface names', async () => {
      const w = namespaces.add();
      const peer = namespaces.add();
      const ra = await attach(req('conf-share-a', w.path, 'eth0'));
      const rb = await attach(req('conf-share-b', w.path, 'eth1'));
      await attach(req('conf-share-peer', peer.path));
      expect(v4On(w.name, 'eth0')).to.deep.equal([addressOf(ra)]);
      expect(v4On(w.name, 'eth1')).to.deep.equal([addressOf(rb)]);
      expect(routesIn(w.name).filter((r) => r.dst === 'default')).to.have.length(1);
      expect(await pings(peer.name, addressOf(ra)), 'peer -> a').to.equal(true);
      expect(await pings(peer.name, addressOf(rb)), 'peer -> b').to.equal(true);
      await detach('conf-share-a', w.path);
      expect(await pings(peer.name, addressOf(rb)), 'peer -> b after a left').to.equal(true);
      await detach('conf-share-b', w.path, 'eth1');
      await detach('conf-share-peer', peer.path);
      expect(linkNames(w.name)).to.deep.equal(['lo']);
    });

    it('returns the same result when Attach is repeated and creates nothing new', async () => {
      const w = namespaces.add();
      const first = await attach(req('conf-idem', w.path));
      const hostLinks = linkNames(node);
      const workloadLinks = linkNames(w.name);
      const again = await attach(req('conf-idem', w.path));
      expect(again).to.deep.equal(first);
      expect(linkNames(node)).to.deep.equal(hostLinks);
      expect(linkNames(w.name)).to.deep.equal(workloadLinks);
    });

    it('works with a /proc/<pid>/ns/net path as well as a bind-mounted one', async () => {
      const w = namespaces.add();
      const sleeper = spawn('ip', ['netns', 'exec', w.name, 'sleep', '120'], { stdio: 'ignore' });
      sleepers.push(sleeper);
      await new Promise((r) => setTimeout(r, 200));
      const res = await attach(req('conf-proc', `/proc/${sleeper.pid}/ns/net`));
      expect(ipJson<unknown[]>(w.name, ['addr', 'show', 'dev', 'eth0'])).to.have.length(1);
      expect(addressOf(res)).to.match(/^10\.251\.0\./);
      await detach('conf-proc');
    });

    it('fails with ALREADY_EXISTS for the same workload in another namespace, changing nothing', async () => {
      const w = namespaces.add();
      const other = namespaces.add();
      await attach(req('conf-dup', w.path));
      const before = linkNames(other.name);
      const err = await attach(req('conf-dup', other.path)).then(
        () => undefined,
        (e: grpc.ServiceError) => e,
      );
      expect(err?.code).to.equal(grpc.status.ALREADY_EXISTS);
      expect(linkNames(other.name)).to.deep.equal(before);
    });

    it('rejects a non-namespace path with INVALID_ARGUMENT and leaves no interface behind', async () => {
      const hostLinks = linkNames(node);
      const err = await attach(req('conf-bad', '/etc/hostname')).then(
        () => undefined,
        (e: grpc.ServiceError) => e,
      );
      expect(err?.code).to.equal(grpc.status.INVALID_ARGUMENT);
      expect(linkNames(node)).to.deep.equal(hostLinks);
    });

    it('rejects an interface name that already exists in the namespace and leaves nothing behind', async () => {
      const w = namespaces.add();
      execFileSync('ip', ['-n', w.name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'taken1']);
      const hostLinks = linkNames(node);
      const err = await attach(req('conf-taken', w.path)).then(
        () => undefined,
        (e: grpc.ServiceError) => e,
      );
      expect(err, 'attach must fail').to.not.equal(undefined);
      expect(err?.details).to.match(/eth0|exist/i);
      expect(linkNames(node)).to.deep.equal(hostLinks);
      const st = await handle.client
        .call(handle.client.raw.get, { workloadId: 'conf-taken', ifName: '' })
        .then(
          () => 'found',
          (e: grpc.ServiceError) => grpc.status[e.code],
        );
      expect(st).to.equal('NOT_FOUND');
    });

    it('detaches twice successfully, and after the namespace is gone leaves no host interface', async () => {
      const baseline = linkNames(node);
      const w = namespaces.add();
      await attach(req('conf-gone', w.path));
      await detach('conf-gone', w.path);
      await detach('conf-gone', w.path);
      expect(linkNames(node)).to.deep.equal(baseline);
      const w2 = namespaces.add();
      await attach(req('conf-gone2', w2.path));
      execFileSync('ip', ['netns', 'del', w2.name]);
      await detach('conf-gone2', w2.path);
      // A veth pair dies with its namespace asynchronously; give the kernel a moment.
      for (let i = 0; i < 50 && linkNames(node).join() !== baseline.join(); i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(linkNames(node)).to.deep.equal(baseline);
      const list = await handle.client.call(handle.client.raw.list, {});
      expect(list.attachments.map((a) => a.workloadId)).to.not.include.members(['conf-gone', 'conf-gone2']);
    });
  });
}
