import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { silentLogger } from '../../../core/logger';
import { CONDITION_REASON, NodeNetworkCondition } from '../../../sources/kubernetes/node-network-condition';
import { StandInKubeApiServer } from '../../support/standin-kube-apiserver';
import { waitUntil } from '../../support/wait-until';

// The Node's NetworkUnavailable condition against the stand-in API server: cleared once the daemon is
// ready, merged by type (the kubelet's conditions stay), written once per run, retried after a backoff.

describe("kubernetes: the Node's NetworkUnavailable condition", function () {
  this.timeout(30_000);
  let root: string;
  let api: StandInKubeApiServer;
  let clock: number;
  const patches = (): number => api.requests.filter((r) => r.verb === 'patch').length;
  const condition = (name: string) =>
    api.node(name)?.status?.conditions?.find((c) => c.type === 'NetworkUnavailable');
  const make = (node: string) =>
    new NodeNetworkCondition({
      nodeName: node,
      kubeconfig: api.kubeconfig(),
      logger: silentLogger(),
      backoffMs: { initial: 1000, max: 4000 },
      now: () => clock,
    });

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-nodecond-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
  });
  after(async () => {
    await api.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });
  beforeEach(() => (clock = 1_000_000));

  it('leaves the condition alone while the daemon is not ready, and clears it once it is, once', async () => {
    api.setNode('nc1', ['10.9.1.0/24']);
    api.setConditions('nc1', [
      { type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated' },
      { type: 'Ready', status: 'True', reason: 'KubeletReady' },
    ]);
    const c = make('nc1');
    const before = patches();
    c.readinessChecked(false);
    await new Promise((r) => setTimeout(r, 200));
    expect(patches()).to.equal(before);
    expect(condition('nc1')?.status).to.equal('True');
    c.readinessChecked(true);
    await waitUntil(() => c.cleared, 'the condition to be written');
    expect(condition('nc1')).to.deep.include({ status: 'False', reason: CONDITION_REASON });
    expect(api.node('nc1')?.status?.conditions?.find((x) => x.type === 'Ready')?.reason).to.equal(
      'KubeletReady',
    );
    const after = patches();
    c.readinessChecked(true);
    c.readinessChecked(true);
    await new Promise((r) => setTimeout(r, 200));
    expect(patches(), 'written once per run').to.equal(after);
  });

  it('retries after its backoff when the Node cannot be written yet (not registered)', async () => {
    const c = make('nc2');
    c.readinessChecked(true);
    await waitUntil(() => patches() > 0 && !api.node('nc2'), 'a first, failed write');
    await new Promise((r) => setTimeout(r, 200));
    const failed = patches();
    api.setNode('nc2', ['10.9.2.0/24']);
    c.readinessChecked(true);
    await new Promise((r) => setTimeout(r, 200));
    expect(patches(), 'no write within the backoff').to.equal(failed);
    clock += 1000;
    c.readinessChecked(true);
    await waitUntil(() => c.cleared, 'the condition to be written after the backoff');
    expect(condition('nc2')?.status).to.equal('False');
  });
});
