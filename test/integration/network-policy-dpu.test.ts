import { expect } from 'chai';
import { codeName, outcome } from '../support/grpc-outcome';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describeRoot } from '../support/describe-root';
import { PolicyCaseRunner, addCasePods } from '../support/policy-case-runner';
import { POLICY_CASES } from '../support/policy-cases';
import { startPolicyDpuNode, type PolicyDpuNode } from '../support/policy-dpu-node';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';

// The upstream NetworkPolicy cases with the pods on a DPU network: the real daemon with the DPU
// backend, the simulator in netns mode enforcing in the DPU's namespace, the Kubernetes source fed by
// a stand-in API server, and real packets between the pods' namespaces, every pair probed.

/**
 * A policy node on a DPU network for the suite, made before its tests and removed after: `simArgs` go to
 * the simulator.
 */
function useDpuNode(o: { name: string; range: string; prefix: string; simArgs?: string[] }): {
  api: () => StandInKubeApiServer;
  dpu: () => PolicyDpuNode;
} {
  let root: string | undefined;
  let api: StandInKubeApiServer | undefined;
  let dpu: PolicyDpuNode | undefined;
  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), `${o.prefix}dir-`));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    api.putNamespace('x', { ns: 'x' });
    dpu = await startPolicyDpuNode({ ...o, root, api });
  });
  after(async () => {
    dpu?.node.stop();
    await dpu?.node.daemon.stop().catch(() => undefined);
    await dpu?.sim()?.stop('SIGKILL');
    dpu?.namespaces.cleanup();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });
  const made = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('the DPU node is not up');
    return v;
  };
  return { api: () => made(api), dpu: () => made(dpu) };
}

describeRoot(
  'NetworkPolicy on a DPU network (root, simulator in netns mode, stand-in API server)',
  function () {
    this.timeout(120_000);
    const rig = useDpuNode({ name: 'np-dpu', range: '10.243.2.0/24', prefix: 'wnpd-' });
    let api: StandInKubeApiServer;
    let dpu: PolicyDpuNode;

    before(async () => {
      [api, dpu] = [rig.api(), rig.dpu()];
      await addCasePods(dpu.node, api);
    });

    afterEach(() => {
      for (const ns of ['x', 'y'])
        for (const n of ['deny-all', 'allow-b', 'allow-d']) api.deleteNetworkPolicy(ns, n);
    });

    it('enforces in the DPU namespace, on the representors, and programs nothing on the node', async () => {
      api.putNetworkPolicy('x', 'deny-all', { podSelector: {}, policyTypes: ['Ingress'] });
      const table = (ns: string): string =>
        spawnSync('ip', [
          'netns',
          'exec',
          ns,
          'nft',
          'list',
          'table',
          'inet',
          'workloadnet_policy',
        ]).stdout.toString();
      const until = Date.now() + 10_000;
      while (!/rp\d+v\d+/.test(table(dpu.namespaces.dpu?.name ?? '')) && Date.now() < until)
        await new Promise((r) => setTimeout(r, 100));
      expect(table(dpu.namespaces.dpu?.name ?? ''), 'the DPU holds the rules').to.match(/iifname|oifname/);
      expect(table(dpu.namespaces.dpu?.name ?? '')).to.match(/rp\d+v\d+/);
      expect(table(dpu.node.ns.name), 'the node holds none').to.equal('');
    });

    for (const c of POLICY_CASES)
      it(`enforces the upstream case "${c.name}" in the DPU: every pair probed, as the case says`, async () => {
        expect(await new PolicyCaseRunner(dpu.node, api, 'np-dpu').run(c)).to.deep.equal([]);
      });
  },
);

describeRoot(
  'NetworkPolicy on a DPU whose agent cannot enforce it (root, simulator of protocol 3, stand-in API server)',
  function () {
    this.timeout(120_000);
    const rig = useDpuNode({
      name: 'np-dpu3',
      range: '10.243.3.0/24',
      prefix: 'wnpd3-',
      simArgs: ['--protocol', '1-3'],
    });

    it('refuses a pod in words, with nothing allocated, and attaches it named as unenforced once the operator allows it', async () => {
      const dpu = rig.dpu();
      const used = async (): Promise<number> =>
        (await dpu.node.daemon.client.status()).pools.reduce((n, p) => n + Number(p.used), 0);
      const before = await used();
      const refused = await outcome(dpu.node.addPod('x', 'a', { pod: 'a' }));
      expect(codeName(refused.code)).to.equal('FAILED_PRECONDITION');
      expect(refused.details).to.match(/DPU agent policy-dpu speaks protocol version 3.*x\/a/);
      expect(refused.details).to.include('dpu.allowUnenforcedPolicy');
      expect(await used()).to.equal(before);

      await dpu.node.daemon.stop();
      await dpu.node.startDaemon({ dpu: { allowUnenforcedPolicy: true } });
      const a = await dpu.node.addPod('x', 'b', { pod: 'b' });
      expect(a.ip).to.match(/^10\.243\.3\./);
      const st = await dpu.node.daemon.client.status();
      expect(st.policy?.unenforced).to.have.length(1);
      expect(st.policy?.unenforced[0]).to.match(/^x_b\//);
    });
  },
);
