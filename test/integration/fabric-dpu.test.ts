import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { StatusResponse } from '../../proto/gen/workloadnet/v1/workload';
import { FabricTopology, fabricRoutes, type BareNode } from '../support/fabric-topology';
import { SimProcess } from '../support/sim-process';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';

// The overlay on the DPUs, end to end: three daemons take address blocks and publish their records in
// a real 3-member etcd. da and db run the DPU backend: their pods sit behind simulated DPUs
// (workloadnet-dpu-sim in netns mode, each in a DPU namespace of its own with an uplink on the test's
// underlay), and the DPUs carry the overlay: each programs a kernel VXLAN device of its own from the
// fabric objects its daemon sends it. db has two DPUs, each claiming blocks of its own (the block's key
// in etcd names node and DPU). nl runs the Linux backend and its host fabric. da and nl share a subnet;
// db sits behind the router. Blocks are /28 (16 addresses), so that a DPU fills one within a few pods.

const CLUSTER = '10.244.0.0/16';
const BLOCK_SIZE = '28';
const PREFIX = '/workloadnet';
const MTU = '1450';

interface Dpu extends BareNode {
  stateFile: string;
  sim?: SimProcess;
}

interface Node extends BareNode {
  dir: string;
  dpus: Dpu[];
  daemon?: DaemonProcess;
}

interface Pod {
  name: string;
  ns: string;
  ip: string;
  node: string;
  dpu?: string;
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(`fabric on the DPUs: simulated DPUs and a Linux node over real etcd${SKIP}`, function () {
  this.timeout(240_000);
  const topo = new FabricTopology();
  const nodes: Node[] = [];
  const pods: Pod[] = [];
  let root: string;
  let etcd: EtcdCluster;

  const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
  const dpu = (id: string): Dpu => nodes.flatMap((n) => n.dpus).find((d) => d.name === id) as Dpu;
  const pod = (name: string): Pod => pods.find((p) => p.name === name) as Pod;
  const status = (n: Node): Promise<StatusResponse> => n.daemon!.client.status();
  const objectsOf = (d: Dpu): FabricObject[] => d.sim?.state()?.fabric ?? [];

  /** Every block key's value in etcd, by block. */
  async function blockValues(): Promise<Map<string, string>> {
    const client = etcd.client();
    try {
      const all = await client.namespace(`${PREFIX}/`).getAll().prefix('blocks/').strings();
      return new Map(Object.entries(all).map(([k, v]) => [k.slice('blocks/'.length).replace('-', '/'), v]));
    } finally {
      client.close();
    }
  }

  function startSim(n: Node, d: Dpu, extra: string[] = []): SimProcess {
    d.sim = SimProcess.start({
      socket: path.join(n.dir, 'agent.sock'),
      agentId: d.name,
      bootId: `boot-${d.name}`,
      stateFile: d.stateFile,
      extra: [
        '--dataplane',
        'netns',
        '--dpu-netns',
        d.ns,
        '--host-netns',
        `/var/run/netns/${n.ns}`,
        ...extra,
      ],
    });
    return d.sim;
  }

  async function attach(n: Node, name: string, dpuId?: string): Promise<Pod> {
    const ns = topo.pool.add(name);
    const p: Pod = { name, ns: ns.name, ip: '', node: n.name, dpu: dpuId };
    await waitUntil(
      async () =>
        n
          .daemon!.client.call(
            n.daemon!.client.raw.attach,
            attachRequest(name, ns.path, 'eth0', dpuId ? { dpu: dpuId } : {}),
          )
          .then((res) => {
            p.ip = (res.ips[0]?.cidr ?? '').split('/')[0] ?? '';
            return true;
          }),
      `${name} attached on ${n.name}`,
      30_000,
      { intervalMs: 200, retryOnError: true },
    );
    pods.push(p);
    return p;
  }

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabdpu-'));
    etcd = await EtcdCluster.start(path.join(root, 'etcd'), 3, 'wn-fabdpu-');
    await topo.build([]);
    const config = path.join(root, 'config.json');
    fs.writeFileSync(config, JSON.stringify({ fabric: { leaseTtlSeconds: 2, withdrawGraceSeconds: 10 } }));
    const layout = [
      { name: 'da', subnet: 1, host: 1, dpus: [['da-d0', 11]] },
      {
        name: 'db',
        subnet: 2,
        host: 2,
        dpus: [
          ['db-d0', 21],
          ['db-d1', 22],
        ],
      },
      { name: 'nl', subnet: 1, host: 3, dpus: [] },
    ] as const;
    for (const l of layout) {
      const bare = await topo.addBareNode({ name: l.name, subnet: l.subnet, host: l.host });
      const dir = path.join(root, l.name);
      fs.mkdirSync(dir, { recursive: true });
      const dpus: Dpu[] = [];
      for (const [id, host] of l.dpus) {
        const d = await topo.addBareNode({ name: id, subnet: l.subnet, host });
        dpus.push({ ...d, stateFile: path.join(dir, `${id}.json`) });
      }
      const n: Node = { ...bare, dir, dpus };
      n.daemon = await DaemonProcess.start({
        dir,
        netns: etcd.netns,
        args: [
          ...['--config', config, '--pool-source', 'etcd', '--node-name', l.name],
          ...['--etcd-endpoints', etcd.endpoints.join(','), '--cluster-cidr', CLUSTER],
          ...['--block-size', BLOCK_SIZE],
          ...['--host-netns', `/var/run/netns/${bare.ns}`, '--fabric', 'vxlan', '--mtu', MTU],
          ...(dpus.length ? ['--backend', 'dpu', '--agent-socket', path.join(dir, 'agent.sock')] : []),
        ],
      });
      nodes.push(n);
      for (const d of dpus)
        await startSim(n, d).waitForState((s) => s.session.state === 'connected' && s.synced, 'connected');
    }
    await attach(node('da'), 'pa', 'da-d0');
    await attach(node('db'), 'pb0', 'db-d0');
    await attach(node('db'), 'pb1', 'db-d1');
    await attach(node('nl'), 'pl');
    for (const n of nodes)
      await waitUntil(
        async () => (await status(n)).fabric?.ready === true,
        `${n.name}'s fabric ready`,
        60_000,
        {
          intervalMs: 200,
        },
      );
  });

  after(async () => {
    for (const n of nodes) for (const d of n.dpus) await d.sim?.stop('SIGKILL');
    for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
    topo.cleanup();
    await etcd?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('each DPU holds its VTEP, its slices, every other tunnel endpoint and one route per remote slice', async () => {
    const da = await status(node('da'));
    const db = await status(node('db'));
    const nl = await status(node('nl'));
    const slicesOf = (st: StatusResponse, id: string): string[] =>
      st.fabric?.endpoints.find((e) => e.id === id)?.prefixes ?? [];
    const nlBlocks = nl.pools.map((p) => p.cidr);
    expect(slicesOf(db, 'db-d0')).to.have.length.greaterThan(0);
    expect(slicesOf(db, 'db-d1')).to.have.length.greaterThan(0);
    const expected = (own: string[], peers: string[], routes: string[]): string[] =>
      [
        'vtep',
        ...own.map((p) => `prefix/${p}`),
        ...peers.map((p) => `peer/${p}`),
        ...routes.map((p) => `route/${p}`),
      ].sort();
    // A route per slice of db, per block of nl; none per pod.
    const dbSlices = [...slicesOf(db, 'db-d0'), ...slicesOf(db, 'db-d1')];
    await waitUntil(
      async () =>
        JSON.stringify(
          objectsOf(dpu('da-d0'))
            .map((o) => o.name)
            .sort(),
        ) ===
        JSON.stringify(
          expected(slicesOf(da, 'da-d0'), ['db/db-d0', 'db/db-d1', 'nl'], [...dbSlices, ...nlBlocks]),
        ),
      "da-d0 holds exactly da's view of the fabric",
      30_000,
      { intervalMs: 200 },
    ).catch(() => undefined);
    expect(
      objectsOf(dpu('da-d0'))
        .map((o) => o.name)
        .sort(),
    ).to.deep.equal(
      expected(slicesOf(da, 'da-d0'), ['db/db-d0', 'db/db-d1', 'nl'], [...dbSlices, ...nlBlocks]),
    );
    // A DPU's sibling on the same node is a peer like any other.
    expect(
      objectsOf(dpu('db-d0'))
        .map((o) => o.name)
        .sort(),
    ).to.deep.equal(
      expected(
        slicesOf(db, 'db-d0'),
        ['da/da-d0', 'db/db-d1', 'nl'],
        [...slicesOf(da, 'da-d0'), ...slicesOf(db, 'db-d1'), ...nlBlocks],
      ),
    );
    const vtep = objectsOf(dpu('da-d0')).find((o) => o.name === 'vtep')?.localVtep;
    expect(vtep?.address, "the DPU's uplink address is its VTEP").to.equal(dpu('da-d0').address);
    expect(vtep?.mtu).to.equal(1450);
    const toDb1 = objectsOf(dpu('da-d0')).find((o) => o.name === 'peer/db/db-d1')?.peer;
    expect(toDb1?.address).to.equal(dpu('db-d1').address);
  });

  it('pods behind DPUs reach each other across nodes, and reach the pods of the Linux node', async () => {
    for (const from of ['pa', 'pb0', 'pb1', 'pl'])
      for (const to of ['pa', 'pb0', 'pb1', 'pl'])
        if (from !== to)
          expect(
            await pings(pod(from).ns, pod(to).ip, { count: 3, waitSeconds: 2 }),
            `${from} → ${to} (${pod(to).ip})`,
          ).to.equal(true);
  });

  it("addresses each pod from its DPU's blocks, whose keys name node and DPU; the Linux node routes per block, not per pod", async () => {
    const db = await status(node('db'));
    const blocksOf = (id: string): string[] => db.fabric?.endpoints.find((e) => e.id === id)?.prefixes ?? [];
    const values = await blockValues();
    for (const id of ['db-d0', 'db-d1']) {
      expect(blocksOf(id), `${id} has blocks`).to.have.length.greaterThan(0);
      for (const b of blocksOf(id)) {
        expect(b, 'a whole block').to.match(new RegExp(`/${BLOCK_SIZE}$`));
        expect(JSON.parse(values.get(b) ?? 'null'), `etcd's value of ${b}`).to.deep.equal({
          node: 'db',
          endpoint: id,
        });
      }
    }
    const inBlocks = (ip: string, id: string): boolean => blocksOf(id).some((p) => within(ip, p));
    expect(inBlocks(pod('pb0').ip, 'db-d0'), `${pod('pb0').ip} in db-d0's blocks`).to.equal(true);
    expect(inBlocks(pod('pb1').ip, 'db-d1'), `${pod('pb1').ip} in db-d1's blocks`).to.equal(true);
    expect(db.pools.map((p) => p.cidr).sort(), 'db serves no block but its DPUs').to.deep.equal(
      [...blocksOf('db-d0'), ...blocksOf('db-d1')].sort(),
    );
    const routes = fabricRoutes(node('nl').ns);
    for (const e of db.fabric?.endpoints ?? [])
      for (const p of e.prefixes)
        expect(
          routes.filter((r) => r.startsWith(`${p} via `)),
          `nl routes ${p} once`,
        ).to.have.length(1);
    expect(
      routes.filter((r) => /^\S+\/32 /.test(r)),
      'no /32',
    ).to.deep.equal([]);
    expect(db.fabric?.borrowed).to.equal(0);
  });

  it('a DPU whose blocks fill claims another one for itself: named for it in etcd, routed, reached, no /32', async () => {
    const db = node('db');
    const before = new Set(
      (await status(db)).fabric?.endpoints.find((e) => e.id === 'db-d1')?.prefixes ?? [],
    );
    let added: string | undefined;
    let last: Pod | undefined;
    for (let i = 0; i < 40 && !added; i++) {
      last = await attach(db, `pf${i}`, 'db-d1');
      const now = (await status(db)).fabric?.endpoints.find((e) => e.id === 'db-d1')?.prefixes ?? [];
      added = now.find((p) => !before.has(p));
    }
    expect(added, 'a new block of db-d1 within 40 pods').to.not.equal(undefined);
    // Fill on until a pod lands in the new block.
    for (let i = 40; i < 80 && !within(last!.ip, added!); i++) last = await attach(db, `pf${i}`, 'db-d1');
    expect(within(last!.ip, added!), `${last!.ip} in ${added}`).to.equal(true);
    expect(JSON.parse((await blockValues()).get(added!) ?? 'null')).to.deep.equal({
      node: 'db',
      endpoint: 'db-d1',
    });
    const st = await status(db);
    expect(st.fabric?.borrowed, 'nothing borrowed').to.equal(0);
    const mine = st.fabric?.endpoints.find((e) => e.id === 'db-d1')?.prefixes ?? [];
    for (const p of pods.filter((x) => x.dpu === 'db-d1'))
      expect(
        mine.some((b) => within(p.ip, b)),
        `${p.name} (${p.ip}) in db-d1's blocks`,
      ).to.equal(true);
    await waitUntil(
      async () => fabricRoutes(node('nl').ns).some((r) => r.startsWith(`${added} via `)),
      "nl routes db-d1's new block",
      30_000,
      { intervalMs: 200 },
    );
    await waitUntil(
      async () => objectsOf(dpu('da-d0')).some((o) => o.name === `route/${added}`),
      "da-d0 holds a route to db-d1's new block",
      30_000,
      { intervalMs: 200 },
    );
    expect(
      fabricRoutes(node('nl').ns).filter((r) => /^\S+\/32 /.test(r)),
      'no /32',
    ).to.deep.equal([]);
    expect(await pings(pod('pl').ns, last!.ip, { count: 3, waitSeconds: 2 }), 'nl → new block').to.equal(
      true,
    );
    expect(await pings(pod('pa').ns, last!.ip, { count: 3, waitSeconds: 2 }), 'da → new block').to.equal(
      true,
    );
  });

  it('a restarted DPU agent gets its whole fabric again, and the node is network-ready only once it acked', async () => {
    const da = node('da');
    const d = dpu('da-d0');
    const before = objectsOf(d)
      .map((o) => o.name)
      .sort();
    await d.sim?.stop('SIGKILL');
    // Slow acks: the window in which the agent is back but has not acknowledged its fabric.
    const sim = startSim(da, d, ['--ack-latency-ms', '1500']);
    let heldBack = false;
    await waitUntil(
      async () => {
        const st = await status(da);
        const connected = st.dpus.find((x) => x.id === 'da-d0')?.connected === true;
        if (connected && !st.ready && st.reasons.join(' ').includes('has not acknowledged its fabric'))
          heldBack = true;
        return connected && st.ready;
      },
      'da ready again',
      60_000,
      { intervalMs: 50 },
    );
    expect(heldBack, 'not ready while the reconnected DPU had not acknowledged its fabric').to.equal(true);
    const state = await sim.waitForState(
      (s) => (s.fabric?.length ?? 0) === before.length,
      'the fabric held again',
    );
    expect((state.fabric ?? []).map((o) => o.name).sort()).to.deep.equal(before);
    expect(await pings(pod('pa').ns, pod('pb1').ip, { count: 3, waitSeconds: 2 })).to.equal(true);
  });

  it('a version 2 agent still serves ports, and Status says it does not carry the fabric', async () => {
    const da = node('da');
    const v2 = await topo.addBareNode({ name: 'da-d9', subnet: 1, host: 19 });
    const d: Dpu = { ...v2, stateFile: path.join(da.dir, 'da-d9.json') };
    da.dpus.push(d);
    await startSim(da, d, ['--protocol', '1-2']).waitForState((s) => s.synced, 'connected');
    const p = await attach(da, 'pv2', 'da-d9');
    expect(p.ip).to.match(/^10\.244\./);
    const st = await status(da);
    const row = st.dpus.find((x) => x.id === 'da-d9');
    expect(row?.protocolVersion).to.equal(2);
    expect(row?.fabric?.carries).to.equal(false);
    expect(row?.fabric?.note).to.include('does not carry the fabric: protocol version 2');
    expect(objectsOf(d), 'no fabric object sent to it').to.deep.equal([]);
    expect(
      st.fabric?.endpoints.map((e) => e.id),
      'and it is no endpoint of the node',
    ).to.not.include('da-d9');
    expect(st.fabric?.ready).to.equal(true);
  });
});

/** Whether an IPv4 address lies in a CIDR (test arithmetic). */
function within(ip: string, cidr: string): boolean {
  const [net = '', len = '32'] = cidr.split('/');
  const n = (a: string): number => a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const size = 2 ** (32 - Number(len));
  return Math.floor(n(ip) / size) === Math.floor(n(net) / size);
}
