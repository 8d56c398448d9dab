// NetworkPolicy in nftables, timed in a test-owned namespace:
// - one small transaction (one set element added or deleted) through the libnftables binding vs
//   spawning nft (the fabric's nftRunner, through nsenter), medians;
// - the policy table's apply for one pod added to a program of 1,000 pods and 1,000 sets, with rules of
//   its own (a libnftables transaction: chain, rules, map elements) and with the rules of a pod already
//   there (map elements: nf_tables netlink), and for one host address added to a selector set (a label
//   change: nf_tables netlink), median and p99 over 200 runs each;
// - adoption by a new instance (one read of the table) and denied() (two set listings).
// Run alone, as root: node dist/test/bench/policy-nft.bench.js

import { performance } from 'node:perf_hooks';
import type { CompiledPolicy, PodPolicy } from '../../core/policy-dataplane';
import { nftRunner } from '../../backends/linux/fabric/nft-runner';
import { HostPolicy } from '../../backends/linux/policy/host-policy';
import { NftContext } from '../../lib/nftables/libnftables';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { NetnsSet } from '../support/netns';

const RUNS = 200;
const PODS = 1000;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

function summary(name: string, ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  return `${name}: median ${quantile(s, 0.5).toFixed(2)} ms, p99 ${quantile(s, 0.99).toFixed(2)} ms (${ms.length} runs)`;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function bindingVsSpawn(nsPath: string): Promise<string[]> {
  const handle = await NetnsHandle.open(nsPath);
  const ctx = NftContext.open(handle);
  handle.close();
  const spawnNft = nftRunner({ netnsPath: nsPath });
  await ctx.run('add table inet bench\nadd set inet bench s { type ipv4_addr; flags interval; }\n');
  const step = (i: number): string =>
    `${i % 2 === 0 ? 'add' : 'delete'} element inet bench s { 10.1.${(i >> 1) % 250}.1 }\n`;
  const binding: number[] = [];
  const spawned: number[] = [];
  for (let i = 0; i < RUNS; i++) binding.push(await timed(() => ctx.run(step(i))));
  for (let i = 0; i < RUNS; i++) spawned.push(await timed(() => spawnNft(step(i))));
  await ctx.run('delete table inet bench\n');
  await ctx.close();
  return [summary('one element, libnftables binding', binding), summary('one element, spawned nft', spawned)];
}

function pod(i: number): PodPolicy {
  return {
    key: `w${i}/eth0`,
    pod: `ns/p${i}`,
    hostIf: `wp${i}`,
    ips: [`10.50.${i >> 8}.${i & 255}`],
    ingress: { rules: [{ sets: [`sel-${i}`], ports: [{ protocol: 'TCP', port: 80 }] }] },
    egress: { rules: [{ sets: [`sel-${(i + 1) % PODS}`] }] },
    policies: [`ns/pol${i}`],
  };
}

async function applyAtScale(nsPath: string): Promise<string[]> {
  const sets = new Map<string, string[]>();
  const pods = new Map<string, PodPolicy>();
  for (let i = 0; i < PODS; i++) {
    sets.set(`sel-${i}`, [`10.50.${i >> 8}.${i & 255}/32`]);
    pods.set(`w${i}/eth0`, pod(i));
  }
  const policy = new HostPolicy(nsPath);
  const program = (): CompiledPolicy => ({ sets: new Map(sets), pods: new Map(pods) });
  const first = await timed(() => policy.apply(program()));
  const added: number[] = [];
  const replica: number[] = [];
  const element: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const extra = pod(PODS + r);
    pods.set(extra.key, { ...extra, ingress: { rules: [{ sets: ['sel-0'] }] }, egress: undefined });
    added.push(await timed(() => policy.apply(program(), { sets: new Set(), pods: new Set([extra.key]) })));
    pods.delete(extra.key);
    await policy.apply(program(), { sets: new Set(), pods: new Set([extra.key]) });
  }
  // A pod whose rules another pod has (a Deployment's replica): its chains exist already.
  for (let r = 0; r < RUNS; r++) {
    const extra = { ...pod(r % PODS), key: `r${r}/eth0`, hostIf: `wr${r}` };
    pods.set(extra.key, extra);
    replica.push(await timed(() => policy.apply(program(), { sets: new Set(), pods: new Set([extra.key]) })));
    pods.delete(extra.key);
    await policy.apply(program(), { sets: new Set(), pods: new Set([extra.key]) });
  }
  for (let r = 0; r < RUNS; r++) {
    const name = `sel-${r % PODS}`;
    sets.set(name, [...(sets.get(name) ?? []), `10.60.${r >> 8}.${r & 255}/32`]);
    element.push(await timed(() => policy.apply(program(), { sets: new Set([name]), pods: new Set() })));
  }
  const denied = await timed(() => policy.denied());
  const adopter = new HostPolicy(nsPath);
  const adopt = await timed(() => adopter.apply(program()));
  await adopter.close();
  await policy.remove();
  await policy.close();
  return [
    `first apply of ${PODS} pods and ${PODS} sets: ${first.toFixed(1)} ms`,
    summary(`one pod added to ${PODS} pods, with rules of its own`, added),
    summary(`one pod added to ${PODS} pods, with the rules of another`, replica),
    summary(`one set element added (${PODS} sets)`, element),
    `adoption of the same program by a new instance (a read, no write): ${adopt.toFixed(1)} ms`,
    `denied() at ${PODS} pods: ${denied.toFixed(1)} ms`,
  ];
}

async function main(): Promise<void> {
  const nss = new NetnsSet('wnpolb-');
  try {
    const ns = nss.add();
    for (const line of [...(await bindingVsSpawn(ns.path)), ...(await applyAtScale(ns.path))])
      console.log(line);
  } finally {
    nss.cleanup();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
