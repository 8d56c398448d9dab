import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { attachRequest } from '../support/attach-request';
import { describeRoot } from '../support/describe-root';
import { codeName, outcome } from '../support/grpc-outcome';
import { NetnsSet } from '../support/netns';
import { PolicyNode } from '../support/policy-node';
import { PolicyCaseRunner, addCasePods } from '../support/policy-case-runner';
import { POLICY_CASES } from '../support/policy-cases';
import { StandInKubeApiServer } from '../support/standin-kube-apiserver';
import { waitUntil } from '../support/wait-until';
import { runCliAsync } from '../support/cli-run';

// NetworkPolicy through the real daemon: the Kubernetes source fed by a stand-in API server, the Linux
// backend programming a test-owned node namespace, pods attached with their identity, and real
// packets between their namespaces.

const DENY_INGRESS = { podSelector: {}, policyTypes: ['Ingress'] };

describeRoot('NetworkPolicy on a node (root, test-owned namespaces, stand-in API server)', function () {
  this.timeout(120_000);
  const namespaces = new NetnsSet('wnnp-');
  let root: string;
  let api: StandInKubeApiServer;
  let node: PolicyNode;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-policy-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    node = await PolicyNode.start({ root, name: 'np-node', range: '10.243.1.0/24', namespaces, api });
    await addCasePods(node, api);
  });

  after(async () => {
    node?.stop();
    await node?.daemon.stop().catch(() => undefined);
    namespaces.cleanup();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  afterEach(() => {
    for (const ns of ['x', 'y'])
      for (const n of ['deny-all', 'allow-b', 'allow-d']) api.deleteNetworkPolicy(ns, n);
  });

  for (const c of POLICY_CASES)
    it(`enforces the upstream case "${c.name}": every pair probed, as the case says`, async () => {
      expect(await new PolicyCaseRunner(node, api, 'np-node').run(c)).to.deep.equal([]);
    });

  it('denies a pod attached under default-deny from its first packet, and lets its allowed flow through at once', async () => {
    api.putNetworkPolicy('x', 'deny-all', DENY_INGRESS);
    api.putNetworkPolicy('x', 'allow-d', {
      podSelector: { matchLabels: { pod: 'd' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }], ports: [{ port: 80 }] }],
    });
    await waitUntil(
      async () => (await node.daemon.client.status()).policy?.policies === 2,
      'both policies held',
      10_000,
    );
    const d = await node.addPod('x', 'd', { pod: 'd' });
    // The first probes, right after the attach answered: no retry, no settling.
    const [fromA, fromB, fromB81, outOfD] = await Promise.all([
      node.reaches('x/a', 'x/d', 80, 'TCP'),
      node.reaches('x/b', 'x/d', 80, 'TCP', 2000),
      node.reaches('x/b', 'x/d', 81, 'TCP'),
      node.reaches('x/d', 'y/a', 80, 'TCP', 2000),
    ]);
    expect({ fromA, fromB, fromB81, outOfD }).to.deep.equal({
      fromA: false,
      fromB: true,
      fromB81: false,
      outOfD: true,
    });
    expect(d.ip).to.match(/^10\.243\.1\./);
  });

  /**
   * Probes an allowed flow (y/b → y/a) and a denied one (x/a → y/a) in rounds while `restart` runs,
   * and for 1.5 s after: every round that saw the allowed flow cut or the denied one let through.
   */
  async function probedAcross(restart: () => Promise<void>): Promise<{ wrong: string[]; rounds: number }> {
    api.putNetworkPolicy('y', 'deny-all', DENY_INGRESS);
    api.putNetworkPolicy('y', 'allow-b', {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }],
    });
    await waitUntil(async () => !(await node.reaches('x/a', 'y/a', 80, 'TCP')), 'y/a isolated', 10_000);
    let running = true;
    const wrong: string[] = [];
    let rounds = 0;
    const probing = (async () => {
      while (running) {
        const [allowed, denied] = await Promise.all([
          node.reaches('y/b', 'y/a', 80, 'TCP', 1000),
          node.reaches('x/a', 'y/a', 80, 'TCP', 300),
        ]);
        if (!allowed) wrong.push(`round ${rounds}: y/b -> y/a cut`);
        if (denied) wrong.push(`round ${rounds}: x/a -> y/a let through`);
        rounds++;
      }
    })();
    await new Promise((r) => setTimeout(r, 500));
    await restart();
    await new Promise((r) => setTimeout(r, 1500));
    running = false;
    await probing;
    return { wrong, rounds };
  }

  it('keeps every allowed flow and lets no denied one through while the daemon is SIGKILLed and restarted', async () => {
    const { wrong, rounds } = await probedAcross(async () => {
      await node.daemon.kill('SIGKILL');
      await new Promise((r) => setTimeout(r, 1000));
      await node.startDaemon();
    });
    expect(wrong).to.deep.equal([]);
    expect(rounds, 'probe rounds across the restart').to.be.greaterThan(5);
  });

  it('keeps its pods under their policies when it restarts on a lost state store (pods adopted, not stripped of their rules)', async () => {
    const { wrong, rounds } = await probedAcross(async () => {
      await node.daemon.kill('SIGKILL');
      fs.rmSync(path.join(root, 'np-node', 'state'), { recursive: true, force: true });
      await node.startDaemon();
    });
    expect(wrong).to.deep.equal([]);
    expect(rounds, 'probe rounds across the restart').to.be.greaterThan(5);
    // The adopted pods are this node's pods again, under the policies that select them.
    const st = await node.daemon.client.status();
    expect(st.policy?.podsIsolated, 'y/a, y/b and y/c isolated again').to.equal(3);
  });

  it('shows with workloadnet policy what a pod enforces, and counts its denied packets in Status', async () => {
    api.putNetworkPolicy('z', 'deny-all', DENY_INGRESS);
    await waitUntil(async () => !(await node.reaches('z/b', 'z/a', 80, 'TCP')), 'z/a isolated', 10_000);
    await node.reaches('y/c', 'z/a', 81, 'UDP');
    const r = await runCliAsync(['policy', 'z/a', '--json', '--socket', node.socket]);
    expect(r.code, r.stderr).to.equal(0);
    const shown = JSON.parse(r.stdout) as {
      status: { policies: number; podsIsolated: number; deniedIngress: number };
      pods: Array<{
        pod: string;
        policies: string[];
        ingressIsolated: boolean;
        egressIsolated: boolean;
        ingress: unknown[];
        deniedIngress: number;
        where: string;
      }>;
    };
    expect(shown.pods.map((p) => p.pod)).to.deep.equal(['z/a']);
    const [a] = shown.pods;
    expect(a).to.include({ ingressIsolated: true, egressIsolated: false, where: 'host' });
    expect(a?.policies).to.deep.equal(['z/deny-all']);
    expect(a?.ingress).to.deep.equal([]);
    expect(a?.deniedIngress, 'the dropped SYNs and datagram').to.be.greaterThan(0);
    expect(shown.status.podsIsolated).to.equal(3);
    const text = await runCliAsync(['policy', 'z', '--socket', node.socket]);
    expect(text.stdout).to.include('z/c (z_c/eth0');
    expect(text.stdout).to.include('ingress: isolated, 0 rule(s)');
    expect(text.stdout).to.include('egress: not isolated');
    expect((await runCliAsync(['policy', 'z/nope', '--socket', node.socket])).code).to.equal(5);
    const st = await node.daemon.client.status();
    expect(st.policy?.deniedIngress).to.be.greaterThan(0);
  });

  it('puts its rules back within seconds when another tool removes them: the kernel tells it, no recheck waited for', async () => {
    api.putNetworkPolicy('z', 'deny-all', DENY_INGRESS);
    await waitUntil(async () => !(await node.reaches('x/a', 'z/a', 80, 'TCP')), 'z/a isolated', 10_000);
    execFileSync('ip', [
      'netns',
      'exec',
      node.ns.name,
      'nft',
      'flush',
      'map',
      'inet',
      'workloadnet_policy',
      'ingress_pods',
    ]);
    // The periodic recheck is 30 s away: only the drift monitor can have put it back this soon.
    await waitUntil(
      async () => !(await node.reaches('x/a', 'z/a', 80, 'TCP')),
      'z/a isolated again after its map element was removed by hand',
      3_000,
    );
    expect(await node.reaches('z/b', 'z/a', 80, 'TCP')).to.equal(false);
  });

  it('refuses, retryably and with nothing allocated, a pod the API server does not know', async () => {
    const before = (await node.daemon.client.status()).pools.reduce((n, p) => n + Number(p.used), 0);
    const netns = namespaces.add('ghost');
    const result = await outcome(
      node.daemon.client.call(
        node.daemon.client.raw.attach,
        attachRequest('x_ghost', netns.path, 'eth0', {
          pod: { namespace: 'x', name: 'ghost', uid: 'u-ghost' },
        }),
      ),
    );
    expect(codeName(result.code)).to.equal('UNAVAILABLE');
    expect(result.details).to.include('x/ghost');
    const after = (await node.daemon.client.status()).pools.reduce((n, p) => n + Number(p.used), 0);
    expect(after).to.equal(before);
    const links = execFileSync('ip', ['-n', netns.name, '-o', 'link'], { encoding: 'utf8' });
    expect(links).to.not.include('eth0');
  });
});
