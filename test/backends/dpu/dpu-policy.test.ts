import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import type { CompiledPolicy, PodPolicy } from '../../../core/policy-dataplane';
import { attachTo } from '../../support/attach-spec';
import { describeRoot } from '../../support/describe-root';
import { NetnsDpuRig } from '../../support/netns-dpu-rig';
import type { TestNamespace } from '../../support/netns';
import { NetnsProber } from '../../support/netns-prober';
import { SimProcess } from '../../support/sim-process';
import { netnsDataplane } from '../../support/simulated-dpu';

// NetworkPolicy offloaded to the DPU (protocol version 4): the backend's PolicyDataplane sends each
// agent its ports' policies and the sets they name, and the simulator in netns mode enforces them with
// nftables in the DPU's namespace, on each port's representor. Probes cross the DPU between workloads.

const PORT = 80;

/** w2 (10.90.0.4) isolated for ingress: only from the set "peers", on TCP 80. */
function program(w2Key: string, peers: string[]): CompiledPolicy {
  const pod: PodPolicy = {
    key: w2Key,
    pod: 'x/b',
    hostIf: w2Key,
    ips: ['10.90.0.4'],
    ingress: { rules: [{ sets: ['peers'], ports: [{ protocol: 'TCP', port: PORT }] }] },
    policies: ['x/allow-peers'],
  };
  return { sets: new Map([['peers', peers]]), pods: new Map([[w2Key, pod]]) };
}

describeRoot('NetworkPolicy on the DPU, enforced by the simulator in netns mode (needs root)', function () {
  this.timeout(90_000);
  const rig = new NetnsDpuRig('wnp-', 'dpu-pol');
  const probers: NetnsProber[] = [];
  let w: TestNamespace[];

  beforeEach(() => {
    w = [rig.workload(), rig.workload(), rig.workload()];
  });
  afterEach(async () => {
    await Promise.all(probers.splice(0).map((p) => p.stop()));
  });

  const connects = async (from: NetnsProber, host: string): Promise<boolean> =>
    (await from.probe({ host, port: PORT, protocol: 'TCP', timeoutMs: 800 })).ok;

  async function attachAll(): Promise<{ keys: string[]; probes: NetnsProber[] }> {
    const specs = w.map((ns, i) => rig.workloadSpec(i + 1, ns));
    for (const s of specs) await attachTo(rig.backend!, s);
    const probes = w.map((ns, i) => new NetnsProber(ns.name, `w${i + 1}`));
    probers.push(...probes);
    await Promise.all(probes.map((p) => p.start([PORT], [])));
    return { keys: specs.map((s) => s.key), probes };
  }

  it('enforces a port policy on the representor, and a set change moves who gets through', async () => {
    const { keys, probes } = await attachAll();
    const [p1, , p3] = probes as [NetnsProber, NetnsProber, NetnsProber];
    expect(await connects(p1, '10.90.0.4'), 'w1 → w2 before any policy').to.equal(true);

    await rig.backend!.policy.apply(program(keys[1]!, ['10.90.0.3/32']));
    const table = execFileSync('ip', [
      'netns',
      'exec',
      rig.dpu.name,
      'nft',
      'list',
      'table',
      'inet',
      'workloadnet_policy',
    ]).toString();
    expect(table, 'the rules match the port representor in the DPU namespace').to.match(/rp0v1/);
    expect(await connects(p1, '10.90.0.4'), 'w1 (in the set) → w2').to.equal(true);
    expect(await connects(p3, '10.90.0.4'), 'w3 (not in the set) → w2').to.equal(false);
    expect(await connects(p1, '10.90.0.5'), 'w3 is not isolated').to.equal(true);

    // A member change re-sends the set alone; the port policy keeps its generation.
    await rig.backend!.policy.apply(program(keys[1]!, ['10.90.0.5/32']));
    expect(await connects(p3, '10.90.0.4'), 'w3 (now in the set) → w2').to.equal(true);
    expect(await connects(p1, '10.90.0.4'), 'w1 (out of the set) → w2').to.equal(false);

    await rig.backend!.policy.apply({ sets: new Map(), pods: new Map() });
    expect(await connects(p1, '10.90.0.4'), 'w1 → w2 once the policy is gone').to.equal(true);
  });

  it('puts the policy back after the agent reboots: its snapshot lists the policy objects', async () => {
    const { keys, probes } = await attachAll();
    const [p1, , p3] = probes as [NetnsProber, NetnsProber, NetnsProber];
    await rig.backend!.policy.apply(program(keys[1]!, ['10.90.0.3/32']));
    await rig.sim!.stop('SIGKILL');
    execFileSync('ip', [
      'netns',
      'exec',
      rig.dpu.name,
      'nft',
      'delete',
      'table',
      'inet',
      'workloadnet_policy',
    ]);
    rig.sim = await rig.startSim('boot-after-reboot');
    await waitFor(
      async () => (await connects(p1, '10.90.0.4')) && !(await connects(p3, '10.90.0.4')),
      'w1 let through and w3 denied again after the reboot',
    );
  });

  it('leaves out, and names in words, a pod whose port is on an agent of protocol 3, enforcing the others', async () => {
    await rig.sim!.stop('SIGKILL');
    rig.sim = SimProcess.start({
      socket: path.join(rig.dir, 'agent.sock'),
      agentId: 'dpu-pol',
      stateFile: path.join(rig.dir, 'sim.json'),
      extra: [...netnsDataplane(rig.dpu.name, rig.node.path), '--protocol', '1-3'],
    });
    await rig.sim.waitForState((x) => x.session.state === 'connected' && x.synced, 'connected');
    const s = rig.workloadSpec(2, w[1]!);
    await attachTo(rig.backend!, s);
    await rig.backend!.policy.apply(program(s.key, ['10.90.0.3/32']));
    const why = rig.backend!.policy.unenforced().get(s.key);
    expect(why).to.match(/DPU agent dpu-pol speaks protocol version 3/);
    expect(why).to.match(/x\/b/);
    // Once the pod is gone from the program, it is no longer named.
    await rig.backend!.policy.apply({ sets: new Map(), pods: new Map() });
    expect([...rig.backend!.policy.unenforced().keys()]).to.deep.equal([]);
  });
});

async function waitFor(cond: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out: ${what}`);
}
