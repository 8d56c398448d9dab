import { expect } from 'chai';
import type { CompiledPolicy, CompiledRule, PodPolicy } from '../../../../core/policy-dataplane';
import { HostPolicy } from '../../../../backends/linux/policy/host-policy';
import { LinuxBackend } from '../../../../backends/linux/linux-backend';
import { NetnsSet } from '../../../support/netns';
import { describeRoot } from '../../../support/describe-root';
import { requireProgram } from '../../../support/system-program';
import { waitUntil } from '../../../support/wait-until';
import { nftIn } from '../../../support/netns-nft';
import {
  EchoServers,
  hostIf,
  listTable,
  hostPolicyNode,
  probe,
  reaches,
  v4,
  v6,
  type Flow,
  type PodName,
  type HostPolicyNode,
} from './host-policy-node';

// The Linux backend's NetworkPolicy in a test node: pods a, b and c behind one forwarding namespace
// (policy-node.ts). Each case applies a program and probes real TCP and UDP flows between the pods.

const key = (p: PodName): string => `${p}/eth0`;
const tcp = (host: string, port = 80): Flow => ({ proto: 'tcp', host, port });
const udp = (host: string, port = 80): Flow => ({ proto: 'udp', host, port });

function pod(p: PodName, dirs: { ingress?: CompiledRule[]; egress?: CompiledRule[] }): PodPolicy {
  return {
    key: key(p),
    pod: `ns/${p}`,
    hostIf: hostIf(p),
    ips: [v4(p), v6(p)],
    ingress: dirs.ingress ? { rules: dirs.ingress } : undefined,
    egress: dirs.egress ? { rules: dirs.egress } : undefined,
    policies: ['ns/policy'],
  };
}

function program(sets: Record<string, string[]>, pods: PodPolicy[]): CompiledPolicy {
  return { sets: new Map(Object.entries(sets)), pods: new Map(pods.map((p) => [p.key, p])) };
}

async function rejects(p: Promise<unknown>, message: RegExp): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  expect(err, 'rejected').to.be.instanceOf(Error);
  expect(err?.message).to.match(message);
}

/** Rule handles per chain, from a listing: what a rewrite would change. */
function ruleHandles(listing: string): string[] {
  return listing.split('\n').filter((l) => /comment "[0-9a-f]{12}:\d+\/\d+" # handle \d+/.test(l));
}

describeRoot('Linux backend: NetworkPolicy in nftables (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const nss = new NetnsSet('wnpol-');
  const servers = new EchoServers();
  let n: HostPolicyNode;
  let policy: HostPolicy;

  before(async function () {
    requireProgram('nft');
    n = hostPolicyNode(nss);
    await Promise.all(Object.values(n.pods).map((p) => servers.start(p)));
    // A fresh node's first IPv6 flows wait for neighbour discovery: every pair answers before a case runs.
    const names = Object.keys(n.pods) as PodName[];
    for (const from of names)
      await waitUntil(
        async () => (await reaches(n.pods[from], [tcp(v6(from === 'a' ? 'b' : 'a'))]))[0] === true,
        `IPv6 from pod ${from} through the node`,
        15_000,
      );
  });

  beforeEach(() => {
    policy = new HostPolicy(n.node.path);
  });

  afterEach(async () => {
    await policy.remove();
    await policy.close();
  });

  after(() => {
    servers.stopAll();
    nss.cleanup();
  });

  it('lets every flow through while no pod is isolated', async () => {
    await policy.apply(program({}, []));
    expect(await reaches(n.pods.a, [tcp(v4('b')), udp(v4('b')), tcp(v6('b'))])).to.deep.equal([
      true,
      true,
      true,
    ]);
  });

  it('denies TCP and UDP from another pod under default deny, while the node itself still reaches the pod', async () => {
    await policy.apply(program({}, [pod('b', { ingress: [] })]));
    expect(await reaches(n.pods.a, [tcp(v4('b')), udp(v4('b')), tcp(v6('b')), udp(v6('b'))])).to.deep.equal([
      false,
      false,
      false,
      false,
    ]);
    expect(await reaches(n.node, [tcp(v4('b')), udp(v4('b')), tcp(v6('b'))])).to.deep.equal([
      true,
      true,
      true,
    ]);
    // Only b is isolated: a still answers c.
    expect(await reaches(n.pods.c, [tcp(v4('a'))])).to.deep.equal([true]);
  });

  it('lets exactly the allowed set and port through, in both families', async () => {
    const rule = { sets: ['from-a'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    await policy.apply(
      program({ 'from-a': [`${v4('a')}/32`, `${v6('a')}/128`] }, [pod('b', { ingress: [rule] })]),
    );
    const flows = [tcp(v4('b')), tcp(v4('b'), 81), udp(v4('b')), tcp(v6('b')), tcp(v6('b'), 81)];
    expect(await reaches(n.pods.a, flows)).to.deep.equal([true, false, false, true, false]);
    expect(await reaches(n.pods.c, [tcp(v4('b')), tcp(v6('b'))])).to.deep.equal([false, false]);
  });

  it('allows a port range and nothing past its end', async () => {
    const rule = { ports: [{ protocol: 'UDP' as const, port: 80, endPort: 81 }] };
    await policy.apply(program({}, [pod('b', { ingress: [rule] })]));
    expect(
      await reaches(n.pods.a, [udp(v4('b')), udp(v4('b'), 81), udp(v4('b'), 82), tcp(v4('b'))]),
    ).to.deep.equal([true, true, false, false]);
  });

  it('moves a pod between sets by editing elements, with no chain rewritten', async () => {
    const rule = { sets: ['web'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const pods = [pod('b', { ingress: [rule] })];
    await policy.apply(program({ web: [`${v4('a')}/32`], db: [`${v4('c')}/32`] }, pods));
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([true]);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([false]);
    const before = ruleHandles(listTable(n.node));
    await policy.apply(program({ web: [`${v4('c')}/32`], db: [`${v4('a')}/32`] }, pods));
    expect(ruleHandles(listTable(n.node))).to.deep.equal(before);
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([false]);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([true]);
  });

  it('refuses a label change whole when an element it deletes was removed by hand, then puts it right', async () => {
    const rule = { sets: ['web'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const pods = [pod('b', { ingress: [rule] })];
    await policy.apply(program({ web: [`${v4('a')}/32`] }, pods));
    const set = /set (s_[0-9a-f]+_v4)/.exec(listTable(n.node))?.[1] ?? '?';
    nftIn(n.node.name, `delete element inet workloadnet_policy ${set} { ${v4('a')} }\n`);
    const moved = program({ web: [`${v4('c')}/32`] }, pods);
    await rejects(policy.apply(moved), /nothing was changed.*ENOENT/);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([false]);
    await policy.apply(moved);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([true]);
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([false]);
  });

  it('applies a change of twenty thousand addresses at once, past what one netlink datagram holds', async () => {
    const rule = { sets: ['many'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const pods = [pod('b', { ingress: [rule] })];
    await policy.apply(program({ many: [] }, pods));
    const many = Array.from(
      { length: 20000 },
      (_, i) => `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}/32`,
    );
    await policy.apply(program({ many: [...many, `${v4('a')}/32`] }, pods));
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([true]);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([false]);
  });

  it('holds host addresses in a hash set and re-creates it as an interval set when it gains a prefix', async () => {
    const rule = { sets: ['peers'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const pods = [pod('b', { ingress: [rule] })];
    await policy.apply(program({ peers: [`${v4('a')}/32`] }, pods));
    const hostSet = /set (s_[0-9a-f]+_v4) \{ # handle \d+\s*type ipv4_addr\s*comment/.exec(
      listTable(n.node),
    )?.[1];
    expect(hostSet, 'a hash set, without flags interval').to.be.a('string');
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([true]);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([false]);
    await policy.apply(program({ peers: [`${v4('a')}/32`, '10.77.3.0/24'] }, pods));
    const after = listTable(n.node);
    expect(after).to.match(/set s_[0-9a-f]+_n4 \{ # handle \d+\s*type ipv4_addr\s*flags interval/);
    expect(after).to.not.contain(`set ${hostSet ?? '?'} `);
    expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([true]);
    expect(await reaches(n.pods.c, [tcp(v4('b')), tcp(v4('b'), 81)])).to.deep.equal([true, false]);
    // Adopted by a new instance as it is: the kind is read back from the set's name.
    const adopter = new HostPolicy(n.node.path);
    const uncounted = (s: string): string => s.replace(/packets \d+ bytes \d+/g, '');
    try {
      await adopter.apply(program({ peers: [`${v4('a')}/32`, '10.77.3.0/24'] }, pods));
      expect(uncounted(listTable(n.node))).to.equal(uncounted(after));
    } finally {
      await adopter.close();
    }
  });

  it("denies a client's egress even where the server's ingress allows it", async () => {
    const all = [{ ports: [{ protocol: 'TCP' as const, port: 80 }] }];
    await policy.apply(
      program({ c: [`${v4('c')}/32`] }, [
        pod('a', { egress: [{ sets: ['c'] }] }),
        pod('b', { ingress: all }),
      ]),
    );
    expect(await reaches(n.pods.a, [tcp(v4('b')), tcp(v4('c'))])).to.deep.equal([false, true]);
    expect(await reaches(n.pods.c, [tcp(v4('b'))])).to.deep.equal([true]);
  });

  it('counts denied packets per pod and direction', async () => {
    await policy.apply(program({}, [pod('b', { ingress: [] }), pod('a', { egress: [{}] })]));
    expect((await policy.denied()).get(key('b'))).to.deep.equal({ ingress: 0, egress: 0 });
    await reaches(n.pods.c, [udp(v4('b')), udp(v4('b'), 81), udp(v4('b'), 82)]);
    const denied = await policy.denied();
    expect(denied.get(key('b'))?.ingress).to.be.at.least(3);
    expect(denied.get(key('a'))).to.deep.equal({ ingress: 0, egress: 0 });
    // A policy change rewrites b's chain; its count goes on from where it was.
    const before = listTable(n.node);
    await policy.apply(
      program({}, [
        pod('b', { ingress: [{ ports: [{ protocol: 'TCP', port: 81 }] }] }),
        pod('a', { egress: [{}] }),
      ]),
    );
    expect(ruleHandles(listTable(n.node))).to.not.deep.equal(ruleHandles(before));
    expect((await policy.denied()).get(key('b'))?.ingress).to.equal(denied.get(key('b'))?.ingress);
  });

  it('is adopted by a new instance with nothing changed and no flow cut or let through meanwhile', async () => {
    const rule = { sets: ['from-a'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const p = program({ 'from-a': [`${v4('a')}/32`] }, [pod('b', { ingress: [rule] })]);
    await policy.apply(p);
    const before = listTable(n.node);
    const during = Promise.all([
      probe(n.pods.a, [tcp(v4('b'))], { repeatMs: 1500, waitMs: 500 }),
      probe(n.pods.c, [tcp(v4('b'))], { repeatMs: 1500, waitMs: 300 }),
    ]);
    const adopter = new HostPolicy(n.node.path);
    try {
      await adopter.apply(p);
      expect(listTable(n.node)).to.equal(before);
    } finally {
      await adopter.close();
    }
    const [[allowed], [denied]] = await during;
    expect(allowed?.failed).to.equal(0);
    expect(allowed?.ok).to.be.greaterThan(0);
    expect(denied?.ok).to.equal(0);
    expect(denied?.failed).to.be.greaterThan(0);
  });

  it('puts back drift once invalidated: a chain flushed, a set element and a map element deleted', async () => {
    const rule = { sets: ['from-a'], ports: [{ protocol: 'TCP' as const, port: 80 }] };
    const p = program({ 'from-a': [`${v4('a')}/32`] }, [
      pod('b', { ingress: [rule] }),
      pod('c', { ingress: [] }),
    ]);
    await policy.apply(p);
    const before = listTable(n.node);
    const chain = /chain (pi_[0-9a-f]+) \{[^}]*saddr/.exec(before)?.[1];
    const set = /set (s_[0-9a-f]+_v4)/.exec(before)?.[1];
    nftIn(
      n.node.name,
      `flush chain inet workloadnet_policy ${chain}\n` +
        `delete element inet workloadnet_policy ${set} { ${v4('a')} }\n` +
        `delete element inet workloadnet_policy ingress_pods { "${hostIf('c')}" }\n`,
    );
    expect(await reaches(n.pods.a, [tcp(v4('c'))])).to.deep.equal([true]);
    const strip = (s: string): string => s.replace(/ # handle \d+/g, '');
    // Without invalidate() an apply trusts what it wrote: the drift stays.
    await policy.apply(p);
    expect(strip(listTable(n.node))).to.not.equal(strip(before));
    policy.invalidate();
    await policy.apply(p);
    expect(strip(listTable(n.node))).to.equal(strip(before));
    expect(await reaches(n.pods.a, [tcp(v4('b')), tcp(v4('c'))])).to.deep.equal([true, false]);
  });

  it('refuses a program it cannot enforce, in words, and changes nothing', async () => {
    const p = program({ 'from-a': [`${v4('a')}/32`] }, [pod('b', { ingress: [{ sets: ['from-a'] }] })]);
    await policy.apply(p);
    const before = listTable(n.node);
    const bad = program({ 'from-a': ['10.77.1.5/33'] }, [pod('b', { ingress: [] })]);
    await rejects(policy.apply(bad), /address set from-a: .*prefix length/);
    // Overlapping intervals pass our checks but not the kernel's: the whole transaction fails.
    const overlap = program({ 'from-a': ['10.0.0.0/8', '10.1.0.0/16'] }, [
      pod('b', { ingress: [] }),
      pod('c', { ingress: [] }),
    ]);
    await rejects(policy.apply(overlap), /nothing was changed/);
    expect(listTable(n.node)).to.equal(before);
    expect(await reaches(n.pods.a, [tcp(v4('b')), tcp(v4('c'))])).to.deep.equal([true, true]);
  });

  it('refuses and never touches a table of its name that lacks its mark', async () => {
    nftIn(n.node.name, 'table inet workloadnet_policy {\n  chain theirs {\n  }\n}\n');
    try {
      const before = listTable(n.node);
      await rejects(
        policy.apply(program({}, [pod('b', { ingress: [] })])),
        /exists but is not workloadnet's/,
      );
      await policy.remove();
      expect(listTable(n.node)).to.equal(before);
    } finally {
      nftIn(n.node.name, 'delete table inet workloadnet_policy\n');
    }
  });

  it("is the Linux backend's policy, in its host namespace", async () => {
    const backend = new LinuxBackend({ hostNetnsPath: n.node.path });
    try {
      expect(backend.policy.where).to.equal('host');
      await backend.policy.apply(program({}, [pod('b', { ingress: [] })]));
      expect(listTable(n.node)).to.match(/oifname vmap @ingress_pods/);
      expect(await reaches(n.pods.a, [tcp(v4('b'))])).to.deep.equal([false]);
      await backend.policy.remove();
    } finally {
      await backend.stop();
    }
  });
});
