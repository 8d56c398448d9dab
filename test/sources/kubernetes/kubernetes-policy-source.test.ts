import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { silentLogger } from '../../../core/logger';
import type { PolicyChange, PolicyPod } from '../../../core/policy-source';
import { KubernetesPolicySource } from '../../../sources/kubernetes/kubernetes-policy-source';
import { rejection } from '../../support/expect-error';
import { StandInKubeApiServer } from '../../support/standin-kube-apiserver';
import { waitUntil } from '../../support/wait-until';

// The Kubernetes policy source with the real @kubernetes/client-node against the stand-in API server:
// Namespaces, Pods and NetworkPolicies listed from the watch cache, watched from the lists' versions,
// relisted after 410 Gone, kept while the API is away; a pod the watch does not hold read once, within
// the caller's deadline.

const ALLOW_WEB = {
  podSelector: { matchLabels: { app: 'web' } },
  ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 'http' }] }],
};

describe('kubernetes policy source (real client library, stand-in API server)', function () {
  this.timeout(60_000);
  let root: string;
  let api: StandInKubeApiServer;
  let source: KubernetesPolicySource;
  const changes: PolicyChange[] = [];

  const pod = (key: string): PolicyPod | undefined => source.state().pods.get(key);
  const reasons = (): string => source.status().reasons.join('\n');
  const soon = (ms: number): number => performance.now() + ms;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-kube-policy-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    api.putNamespace('x', { team: 'a' });
    api.putPod({
      namespace: 'x',
      name: 'web',
      labels: { app: 'web' },
      ips: ['10.60.1.5', 'fd00:60:0:0::5'],
      ports: [
        { name: 'http', containerPort: 8080 },
        { name: 'dns', containerPort: 53, protocol: 'UDP' },
        { containerPort: 9 },
      ],
      nodeName: 'n1',
    });
    api.putNetworkPolicy('x', 'allow-web', ALLOW_WEB);
    source = new KubernetesPolicySource({
      kubeconfig: api.kubeconfig(),
      logger: silentLogger(),
      backoffMs: { initial: 50, max: 400 },
    });
    source.onChange((c) => changes.push(c));
  });
  after(async () => {
    await source?.stop();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('lists each kind from the watch cache, in the model: canonical addresses, named ports, defaulted policy types and protocols', async () => {
    expect(source.synced()).to.equal(false);
    await source.start();
    await waitUntil(() => source.synced(), 'all three kinds listed');
    expect(changes.filter((c) => c.kind === 'all').length, "one 'all' per kind's list").to.equal(3);
    const state = source.state();
    expect(state.namespaces.get('x')).to.deep.equal({
      name: 'x',
      labels: { 'kubernetes.io/metadata.name': 'x', team: 'a' },
    });
    expect(pod('x/web')).to.deep.equal({
      namespace: 'x',
      name: 'web',
      uid: 'uid-x-web',
      labels: { app: 'web' },
      ips: ['10.60.1.5', 'fd00:60::5'],
      namedPorts: [
        { name: 'http', protocol: 'TCP', port: 8080 },
        { name: 'dns', protocol: 'UDP', port: 53 },
      ],
      nodeName: 'n1',
      hostNetwork: false,
    });
    expect(state.policies.get('x/allow-web')).to.deep.equal({
      namespace: 'x',
      name: 'allow-web',
      podSelector: { matchLabels: { app: 'web' } },
      policyTypes: ['Ingress'],
      ingress: [
        {
          ports: [{ protocol: 'TCP', port: 'http' }],
          peers: [{ podSelector: { matchLabels: { app: 'client' } } }],
        },
      ],
      egress: [],
    });
    const lists = api.requests.filter((r) => r.verb === 'list');
    expect(lists.map((r) => r.path).sort()).to.deep.equal([
      '/api/v1/namespaces',
      '/api/v1/pods',
      '/apis/networking.k8s.io/v1/networkpolicies',
    ]);
    expect(
      lists.every((r) => r.resourceVersion === '0'),
      'from the watch cache',
    ).to.equal(true);
    await waitUntil(() => api.count('watch') >= 3, 'three watches');
    expect(source.status()).to.deep.equal({ synced: true, namespaces: 1, pods: 1, policies: 1, reasons: [] });
  });

  it('follows each kind by its watch; a label change arrives as a pod change once the state holds it', async () => {
    const seen: Array<string | undefined> = [];
    source.onChange((c) => {
      if (c.kind === 'pod' && c.key === 'x/web') seen.push(pod('x/web')?.labels.tier);
    });
    const lists = api.count('list');
    const web = {
      namespace: 'x',
      name: 'web',
      labels: { app: 'web', tier: 'front' },
      ips: ['10.60.1.5'],
      nodeName: 'n1',
    };
    api.putPod(web);
    await waitUntil(() => seen.length > 0, 'the pod change');
    expect(seen, 'the listener saw the new label in state()').to.deep.equal(['front']);
    api.putNamespace('y', { team: 'b' });
    api.putNetworkPolicy('y', 'deny-egress', { podSelector: {}, policyTypes: ['Egress'] });
    await waitUntil(
      () => source.state().namespaces.has('y') && source.state().policies.has('y/deny-egress'),
      'the namespace and the policy',
    );
    expect(changes).to.deep.include({ kind: 'namespace', name: 'y' });
    expect(changes).to.deep.include({ kind: 'policy', key: 'y/deny-egress' });
    expect(source.state().policies.get('y/deny-egress')?.policyTypes).to.deep.equal(['Egress']);
    // The same object again (a resync of an unchanged pod) changes nothing and says nothing.
    const before = changes.length;
    api.putPod(web);
    api.putNamespace('y', { team: 'c' });
    await waitUntil(() => source.state().namespaces.get('y')?.labels.team === 'c', 'the later change');
    expect(changes.slice(before)).to.deep.equal([{ kind: 'namespace', name: 'y' }]);
    expect(api.count('list'), 'no relist').to.equal(lists);
  });

  it('leaves out pods that have finished (Succeeded, Failed), whose addresses are released', async () => {
    api.putPod({ namespace: 'x', name: 'job', labels: { app: 'job' }, ips: ['10.60.1.9'], phase: 'Running' });
    await waitUntil(() => pod('x/job') !== undefined, 'the running job');
    api.putPod({
      namespace: 'x',
      name: 'job',
      labels: { app: 'job' },
      ips: ['10.60.1.9'],
      phase: 'Succeeded',
    });
    await waitUntil(() => pod('x/job') === undefined, 'the finished job gone');
    expect(changes).to.deep.include({ kind: 'pod', key: 'x/job' });
    api.putPod({ namespace: 'x', name: 'failed', ips: ['10.60.1.10'], phase: 'Failed' });
    api.putPod({ namespace: 'x', name: 'marker', ips: ['10.60.1.11'] });
    await waitUntil(() => pod('x/marker') !== undefined, 'a later pod');
    expect(pod('x/failed')).to.equal(undefined);
    api.deletePod('x', 'job');
    api.deletePod('x', 'failed');
    api.deletePod('x', 'marker');
    await waitUntil(() => pod('x/marker') === undefined, 'deleted');
  });

  it('refuses a policy the API would refuse, in words, keeps the others, and takes it once fixed', async () => {
    api.putNetworkPolicy('x', 'bad-op', {
      podSelector: { matchExpressions: [{ key: 'app', operator: 'Near' }] },
    });
    api.putNetworkPolicy('x', 'bad-except', {
      podSelector: {},
      egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/16', except: ['10.1.0.0/24'] } }] }],
    });
    api.putNetworkPolicy('x', 'bad-endport', {
      podSelector: {},
      ingress: [{ ports: [{ port: 'http', endPort: 90 }] }],
    });
    await waitUntil(() => source.status().reasons.length === 3, 'three refused');
    expect(source.status().reasons).to.deep.equal([
      'NetworkPolicy x/bad-op refused: spec.podSelector.matchExpressions[0].operator is "Near", not In, NotIn, ' +
        'Exists or DoesNotExist; it is left out (the pods it selects are isolated only by the other policies)',
      'NetworkPolicy x/bad-except refused: spec.egress[0].to[0].ipBlock.except[0] 10.1.0.0/24 is not inside cidr ' +
        '10.0.0.0/16; it is left out (the pods it selects are isolated only by the other policies)',
      'NetworkPolicy x/bad-endport refused: spec.ingress[0].ports[0].endPort is set without a numeric port; ' +
        'it is left out (the pods it selects are isolated only by the other policies)',
    ]);
    expect([...source.state().policies.keys()].sort()).to.deep.equal(['x/allow-web', 'y/deny-egress']);
    // A held policy changed into one the API would refuse leaves the state (never kept in its old form).
    api.putNetworkPolicy('y', 'deny-egress', {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [{ to: [{}] }],
    });
    await waitUntil(() => !source.state().policies.has('y/deny-egress'), 'the broken update taken out');
    expect(reasons()).to.match(
      /NetworkPolicy y\/deny-egress refused: spec\.egress\[0\]\.to\[0\] names no peer/,
    );
    // Fixed: in again, and the reasons go; deleted: the reason goes with it.
    api.putNetworkPolicy('y', 'deny-egress', { podSelector: {}, policyTypes: ['Egress'] });
    api.putNetworkPolicy('x', 'bad-except', {
      podSelector: {},
      egress: [{ to: [{ ipBlock: { cidr: '10.0.0.1/16', except: ['10.0.1.0/24'] } }] }],
    });
    api.deleteNetworkPolicy('x', 'bad-op');
    api.deleteNetworkPolicy('x', 'bad-endport');
    await waitUntil(() => source.status().reasons.length === 0, 'no refusal left');
    expect(source.state().policies.get('x/bad-except')).to.deep.equal({
      namespace: 'x',
      name: 'bad-except',
      podSelector: {},
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      // Host bits cleared, as the API server reads the cidr.
      egress: [{ peers: [{ ipBlock: { cidr: '10.0.0.0/16', except: ['10.0.1.0/24'] } }] }],
    });
    expect(source.state().policies.has('y/deny-egress')).to.equal(true);
    api.deleteNetworkPolicy('x', 'bad-except');
  });

  it('resumes a dropped watch from the last version it saw, without a list', async () => {
    const lists = api.count('list');
    const watches = api.count('watch');
    const seen = api.resourceVersion;
    api.dropWatches();
    api.putPod({
      namespace: 'x',
      name: 'web',
      labels: { app: 'web', tier: 'back' },
      ips: ['10.60.1.5'],
      nodeName: 'n1',
    });
    await waitUntil(() => pod('x/web')?.labels.tier === 'back', 'the change made while disconnected');
    const pods = api.requests.filter((r) => r.verb === 'watch' && r.path === '/api/v1/pods');
    const resumed = pods.at(-1);
    expect(api.count('watch')).to.be.greaterThan(watches);
    expect(Number(resumed?.resourceVersion), 'from the last version seen, not from now').to.be.within(
      1001,
      seen,
    );
    expect(api.count('list'), 'no relist').to.equal(lists);
  });

  it("lists again after 410 Gone: objects deleted meanwhile are gone, with one 'all' change per kind", async () => {
    api.putPod({ namespace: 'y', name: 'db', labels: { app: 'db' }, ips: ['10.60.2.7'] });
    await waitUntil(
      () => pod('y/db') !== undefined && !source.state().policies.has('x/bad-except'),
      'settled',
    );
    const alls = changes.filter((c) => c.kind === 'all').length;
    const lists = api.count('list');
    api.dropWatches();
    api.deletePod('y', 'db');
    api.deleteNetworkPolicy('y', 'deny-egress');
    api.deleteNamespace('y');
    api.putNamespace('z');
    api.expireHistory();
    await waitUntil(() => changes.filter((c) => c.kind === 'all').length === alls + 3, 'three relists');
    expect(api.count('list')).to.equal(lists + 3);
    expect([...source.state().namespaces.keys()].sort()).to.deep.equal(['x', 'z']);
    expect(pod('y/db')).to.equal(undefined);
    expect([...source.state().policies.keys()]).to.deep.equal(['x/allow-web']);
    expect(source.synced()).to.equal(true);
  });

  it('reads a pod the watch does not hold yet, once; takes a held one from the watch; undefined when the API has none', async () => {
    const gets = (): number => api.count('get');
    const held = await source.lookupPod({ namespace: 'x', name: 'web', uid: 'uid-x-web' }, soon(1000));
    expect(held).to.equal(pod('x/web'));
    expect(await source.lookupPod({ namespace: 'x', name: 'web', uid: '' }, soon(1000))).to.equal(
      pod('x/web'),
    );
    expect(gets(), 'no read for a pod the watch holds').to.equal(0);
    // The CNI ADD comes before the watch delivers the pod.
    api.holdWatchEvents(true);
    api.putPod({ namespace: 'x', name: 'new', uid: 'u-new', labels: { app: 'client' }, ips: ['10.60.1.20'] });
    const read = await source.lookupPod({ namespace: 'x', name: 'new', uid: 'u-new' }, soon(2000));
    expect(read).to.deep.include({
      namespace: 'x',
      name: 'new',
      uid: 'u-new',
      labels: { app: 'client' },
      ips: ['10.60.1.20'],
    });
    expect(gets()).to.equal(1);
    expect(api.requests.at(-1)).to.deep.include({ verb: 'get', path: '/api/v1/namespaces/x/pods/new' });
    // Held with another uid (the pod was replaced): read, and the new one is it.
    api.putPod({ namespace: 'x', name: 'web', uid: 'uid-web-2', labels: { app: 'web' }, ips: ['10.60.1.6'] });
    const replaced = await source.lookupPod({ namespace: 'x', name: 'web', uid: 'uid-web-2' }, soon(2000));
    expect(replaced?.ips).to.deep.equal(['10.60.1.6']);
    // The API has no such pod, or one of another uid: undefined.
    expect(await source.lookupPod({ namespace: 'x', name: 'ghost', uid: '' }, soon(2000))).to.equal(
      undefined,
    );
    expect(await source.lookupPod({ namespace: 'x', name: 'new', uid: 'u-old' }, soon(2000))).to.equal(
      undefined,
    );
    expect(gets()).to.equal(4);
    api.holdWatchEvents(false);
    await waitUntil(
      () => pod('x/new') !== undefined && pod('x/web')?.uid === 'uid-web-2',
      'the watch caught up',
    );
  });

  it('says in words, within the deadline, when the API cannot answer a read: hung, then down', async () => {
    api.stallReads(true);
    const t0 = performance.now();
    const err = await rejection(
      source.lookupPod({ namespace: 'x', name: 'absent', uid: '' }, soon(300)),
      'UNAVAILABLE',
    );
    const took = performance.now() - t0;
    api.stallReads(false);
    expect(err.message).to.match(
      /^pod x\/absent: the Kubernetes API did not answer a read of it within \d+ ms$/,
    );
    expect(took).to.be.within(250, 300 + 250);
    // No time left: refused without a request.
    const gets = api.count('get');
    const late = await rejection(
      source.lookupPod({ namespace: 'x', name: 'absent', uid: '' }, soon(-1)),
      'UNAVAILABLE',
    );
    expect(late.message).to.match(/no time is left to read it/);
    expect(api.count('get')).to.equal(gets);
    await api.stop();
    try {
      const t1 = performance.now();
      const down = await rejection(
        source.lookupPod({ namespace: 'x', name: 'absent', uid: '' }, soon(5000)),
        'UNAVAILABLE',
      );
      expect(down.message).to.match(/^pod x\/absent cannot be read from the Kubernetes API: .+/);
      expect(performance.now() - t1, 'a refused connection is said at once').to.be.below(2000);
      // A pod the watch holds is still answered while the API is away.
      expect(await source.lookupPod({ namespace: 'x', name: 'web', uid: '' }, soon(100))).to.equal(
        pod('x/web'),
      );
    } finally {
      await api.listen();
    }
  });

  it('keeps the last state while the API is away, stays synced, says so, and follows again when it is back', async () => {
    await waitUntil(() => source.status().reasons.length === 0, 'reachable again');
    const before = source.state();
    const counts = {
      namespaces: before.namespaces.size,
      pods: before.pods.size,
      policies: before.policies.size,
    };
    expect(counts.pods, 'something to keep').to.be.greaterThan(0);
    await api.stop();
    await waitUntil(() => /Kubernetes API unreachable/.test(reasons()), 'the API said away');
    expect(reasons()).to.match(
      new RegExp(
        `^Kubernetes API unreachable \\(.+\\); keeping the last known ${counts.namespaces} namespaces, ` +
          `${counts.pods} pods and ${counts.policies} network policies$`,
      ),
    );
    expect(source.synced()).to.equal(true);
    expect(source.status()).to.deep.include({ synced: true, ...counts });
    expect(source.state().pods.get('x/web')).to.deep.equal(before.pods.get('x/web'));
    await api.listen();
    api.putPod({
      namespace: 'x',
      name: 'web',
      uid: 'uid-web-2',
      labels: { app: 'web', v: '2' },
      ips: ['10.60.1.6'],
    });
    await waitUntil(() => pod('x/web')?.labels.v === '2' && source.status().reasons.length === 0, 'back');
  });
});
