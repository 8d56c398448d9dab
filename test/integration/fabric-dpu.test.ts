import { expect } from 'chai';
import type { StatusResponse } from '../../proto/gen/workloadnet/v1/workload';
import { cidrContains, parseAddress, parseCidr } from '../../lib/cidr';
import { ETCD_VXLAN, FabricCluster, type ClusterNode, type ClusterPod } from '../support/fabric-cluster';
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

const BLOCK_SIZE = '28';
const PREFIX = '/workloadnet';

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(`fabric on the DPUs: simulated DPUs and a Linux node over real etcd${SKIP}`, function () {
  this.timeout(240_000);
  let c: FabricCluster;
  const pods = new Map<string, ClusterPod>();

  const node = (name: string): ClusterNode => c.node(name);
  const pod = (name: string): ClusterPod => pods.get(name) as ClusterPod;
  const status = (n: ClusterNode): Promise<StatusResponse> => c.status(n);
  const objectNames = (dpu: string): string[] =>
    c
      .dpu(dpu)
      .objects()
      .map((o) => o.name)
      .sort();
  const attach = async (n: ClusterNode, name: string, dpu?: string): Promise<ClusterPod> => {
    const p = await c.attachPod(n, name, dpu);
    pods.set(name, p);
    return p;
  };

  /** Every block key's value in etcd, by block. */
  async function blockValues(): Promise<Map<string, string>> {
    const client = (c.etcd as EtcdCluster).client();
    try {
      const all = await client.namespace(`${PREFIX}/`).getAll().prefix('blocks/').strings();
      return new Map(Object.entries(all).map(([k, v]) => [k.slice('blocks/'.length).replace('-', '/'), v]));
    } finally {
      client.close();
    }
  }

  before(async () => {
    c = await FabricCluster.start({
      ...ETCD_VXLAN,
      flags: { 'block-size': BLOCK_SIZE },
      nodes: [
        { name: 'da', subnet: 1, host: 1, dpus: [{ name: 'da-d0', host: 11 }] },
        {
          name: 'db',
          subnet: 2,
          host: 2,
          dpus: [
            { name: 'db-d0', host: 21 },
            { name: 'db-d1', host: 22 },
          ],
        },
        { name: 'nl', subnet: 1, host: 3 },
      ],
    });
    await attach(node('da'), 'pa', 'da-d0');
    await attach(node('db'), 'pb0', 'db-d0');
    await attach(node('db'), 'pb1', 'db-d1');
    await attach(node('nl'), 'pl');
    await c.fabricReady();
  });

  after(async () => {
    await c?.teardown();
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
    const daView = expected(
      slicesOf(da, 'da-d0'),
      ['db/db-d0', 'db/db-d1', 'nl'],
      [...dbSlices, ...nlBlocks],
    );
    await waitUntil(
      async () => JSON.stringify(objectNames('da-d0')) === JSON.stringify(daView),
      "da-d0 holds exactly da's view of the fabric",
      30_000,
      { intervalMs: 200 },
    ).catch(() => undefined);
    expect(objectNames('da-d0')).to.deep.equal(daView);
    // A DPU's sibling on the same node is a peer like any other.
    expect(objectNames('db-d0')).to.deep.equal(
      expected(
        slicesOf(db, 'db-d0'),
        ['da/da-d0', 'db/db-d1', 'nl'],
        [...slicesOf(da, 'da-d0'), ...slicesOf(db, 'db-d1'), ...nlBlocks],
      ),
    );
    const vtep = c
      .dpu('da-d0')
      .objects()
      .find((o) => o.name === 'vtep')?.localVtep;
    expect(vtep?.address, "the DPU's uplink address is its VTEP").to.equal(c.dpu('da-d0').address);
    expect(vtep?.mtu).to.equal(1450);
    const toDb1 = c
      .dpu('da-d0')
      .objects()
      .find((o) => o.name === 'peer/db/db-d1')?.peer;
    expect(toDb1?.address).to.equal(c.dpu('db-d1').address);
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
    const routes = c.routes(node('nl'));
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
    let last: ClusterPod | undefined;
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
    for (const p of db.pods.filter((x) => x.dpu === 'db-d1'))
      expect(
        mine.some((b) => within(p.ip, b)),
        `${p.workload} (${p.ip}) in db-d1's blocks`,
      ).to.equal(true);
    await waitUntil(
      async () => c.routes(node('nl')).some((r) => r.startsWith(`${added} via `)),
      "nl routes db-d1's new block",
      30_000,
      { intervalMs: 200 },
    );
    await waitUntil(
      async () => objectNames('da-d0').includes(`route/${added}`),
      "da-d0 holds a route to db-d1's new block",
      30_000,
      { intervalMs: 200 },
    );
    expect(
      c.routes(node('nl')).filter((r) => /^\S+\/32 /.test(r)),
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
    const d = c.dpu('da-d0');
    const before = objectNames('da-d0');
    await d.stop('SIGKILL');
    // Slow acks: the window in which the agent is back but has not acknowledged its fabric.
    const sim = d.start(undefined, ['--ack-latency-ms', '1500']);
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
    const d = await c.addDpu(da, { name: 'da-d9', host: 19 });
    await d.start(undefined, ['--protocol', '1-2']).waitForState((s) => s.synced, 'connected');
    const p = await attach(da, 'pv2', 'da-d9');
    expect(p.ip).to.match(/^10\.244\./);
    const st = await status(da);
    const row = st.dpus.find((x) => x.id === 'da-d9');
    expect(row?.protocolVersion).to.equal(2);
    expect(row?.fabric?.carries).to.equal(false);
    expect(row?.fabric?.note).to.include('does not carry the fabric: protocol version 2');
    expect(d.objects(), 'no fabric object sent to it').to.deep.equal([]);
    expect(
      st.fabric?.endpoints.map((e) => e.id),
      'and it is no endpoint of the node',
    ).to.not.include('da-d9');
    expect(st.fabric?.ready).to.equal(true);
  });
});

/** Whether an IPv4 address lies in a CIDR. */
function within(ip: string, cidr: string): boolean {
  return cidrContains(parseCidr(cidr), parseAddress(ip).value);
}
