import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { bindPoolSource } from '../../../cli/pool-source-wiring';
import { ApiClient } from '../../../cli/api-client';
import { BACKEND, type Backend } from '../../../core/backend';
import { DEFAULT_CONFIG, type ConfigOverrides } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { createContainer } from '../../../core/daemon/container';
import { Daemon } from '../../../core/daemon/daemon';
import { silentLogger } from '../../../core/logger';
import { Metrics } from '../../../core/metrics';
import type { StatusResponse } from '../../../proto/gen/workloadnet/v1/workload';
import { NetnsSet } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { RecordingBackend } from '../../support/recording-backend';
import { eventually, grpcCode, inBlock } from '../support/pool-nodes';
import { StandInKubeApiServer } from '../../support/standin-kube-apiserver';
import { attachRequest } from '../../support/attach-request';

// The kubernetes pool source with the real @kubernetes/client-node against a stand-in API server
// (HTTPS, test CA, bearer token; Node get/list/watch with field selector and resourceVersion, 410 on
// expired versions), in a daemon wired exactly as `--pool-source kubernetes` wires it. The dataplane is
// the recording backend: what is under test is where addresses come from.

const NODE = 'worker-1';

class Node {
  readonly client: ApiClient;
  private constructor(
    readonly daemon: Daemon,
    socket: string,
  ) {
    this.client = new ApiClient(socket, 10_000);
  }

  static async start(dir: string, kubeconfig: string, more: ConfigOverrides = {}): Promise<Node> {
    const config = mergeConfig(DEFAULT_CONFIG, {
      socket: path.join(dir, 'api.sock'),
      cniSocket: path.join(dir, 'cni.sock'),
      stateDir: path.join(dir, 'state'),
      poolSource: 'kubernetes',
      nodeName: NODE,
      kubeconfig,
      // The pool source alone: the request log below is of Node reads only (policy has its own tests).
      networkPolicy: 'off',
      ...more,
    });
    const container = createContainer(config, silentLogger(), new Metrics());
    container.bind<Backend>(BACKEND).toConstantValue(new RecordingBackend());
    await bindPoolSource(container, config, silentLogger());
    const daemon = new Daemon(container);
    await daemon.start();
    return new Node(daemon, config.socket);
  }

  status(): Promise<StatusResponse> {
    return this.client.status();
  }

  async attach(workloadId: string, netnsPath: string, network = ''): Promise<string[]> {
    const res = await this.client.call(
      this.client.raw.attach,
      attachRequest(workloadId, netnsPath, 'eth0', { network }),
    );
    return res.ips.map((i) => i.cidr.split('/')[0]!);
  }

  detach(workloadId: string): Promise<unknown> {
    return this.client.call(this.client.raw.detach, { workloadId, netns: undefined });
  }

  async stop(): Promise<void> {
    this.client.close();
    await this.daemon.stop();
  }
}

describeRoot('kubernetes pool source (real client library, stand-in API server)', function () {
  this.timeout(60_000);
  const namespaces = new NetnsSet('wn-pools-k');
  let root: string;
  let api: StandInKubeApiServer;
  let node: Node;
  let seq = 0;
  const ns = (): string => namespaces.add().path;
  const pools = async (): Promise<string[]> =>
    (await node.status()).pools.map((p) => `${p.cidr}:${p.state}`).sort();

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-pools-k8s-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    api.setNode(NODE); // registered, no ranges yet
    node = await Node.start(path.join(root, 'node'), api.kubeconfig());
  });
  after(async () => {
    await node?.stop();
    await api?.stop();
    namespaces.cleanup();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('stand-in API: is not ready before the Node has ranges, and Attach fails UNAVAILABLE', async () => {
    await eventually('the Node read once', async () => (await node.status()).poolSource?.connected === true);
    const st = await node.status();
    expect(st.ready).to.equal(false);
    expect(st.poolSource?.kind).to.equal('kubernetes');
    expect(st.reasons.join(' ')).to.include(`Node ${NODE}`).and.to.include('podCIDRs');
    const err = await node.attach(`w${seq++}`, ns()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(grpcCode(err)).to.equal(grpc.status.UNAVAILABLE);
    // Only this Node, by field selector, on every list and watch.
    for (const r of api.requests.filter((x) => x.verb !== 'get'))
      expect(r.fieldSelector).to.equal(`metadata.name=${NODE}`);
  });

  it('stand-in API: becomes ready when the Node gets a range, and serves addresses from it', async () => {
    api.setNode(NODE, ['10.44.1.0/24']);
    await eventually('ready', async () => (await node.status()).ready);
    expect(await pools()).to.deep.equal(['10.44.1.0/24:active']);
    const [ip] = await node.attach(`w${seq++}`, ns());
    expect(inBlock(ip!, '10.44.1.0/24')).to.equal(true);
  });

  it('stand-in API: serves dual-stack from the two podCIDRs entries', async () => {
    api.setNode(NODE, ['10.44.1.0/24', 'fd44:1::/64']);
    await eventually('IPv6 pool', async () => (await pools()).includes('fd44:1::/64:active'));
    const ips = await node.attach(`w${seq++}`, ns());
    expect(ips).to.have.length(2);
    expect(inBlock(ips[0]!, '10.44.1.0/24')).to.equal(true);
    expect(inBlock(ips[1]!, 'fd44:1::/64')).to.equal(true);
  });

  it("stand-in API: ignores another Node's ranges", async () => {
    const before = await pools();
    api.setNode('worker-2', ['10.44.2.0/24']);
    api.setNode(NODE, ['10.44.1.0/24', 'fd44:1::/64']); // an event of ours after theirs
    await new Promise((r) => setTimeout(r, 300));
    expect(await pools()).to.deep.equal(before);
  });

  it('stand-in API: resumes the watch from its resourceVersion after a dropped connection', async () => {
    const lists = api.count('list');
    const watches = api.count('watch');
    const seen = api.resourceVersion;
    api.dropWatches();
    api.setNode(NODE, ['10.44.1.0/24', 'fd44:1::/64', '10.44.3.0/24']); // happens while disconnected
    await eventually('the change made while disconnected', async () =>
      (await pools()).includes('10.44.3.0/24:active'),
    );
    const rewatch = api.requests.filter((r) => r.verb === 'watch').slice(watches);
    expect(rewatch.length).to.be.greaterThan(0);
    expect(Number(rewatch[0]!.resourceVersion)).to.equal(seen);
    expect(api.count('list'), 'no relist').to.equal(lists);
  });

  it('stand-in API: relists after 410 Gone on an expired resourceVersion', async () => {
    const lists = api.count('list');
    api.dropWatches();
    api.setNode(NODE, ['10.44.1.0/24', 'fd44:1::/64']);
    api.expireHistory();
    await eventually(
      'the relisted ranges',
      async () => !(await pools()).some((p) => p.startsWith('10.44.3.0/24')),
    );
    expect(api.count('list')).to.be.greaterThan(lists);
  });

  it('stand-in API: keeps serving a removed range while its addresses are in use, and says so', async () => {
    const id = `w${seq++}`;
    const [ip] = await node.attach(id, ns());
    expect(inBlock(ip!, '10.44.1.0/24')).to.equal(true);
    api.setNode(NODE, ['10.44.5.0/24', 'fd44:1::/64']);
    await eventually('the old range draining', async () => (await pools()).includes('10.44.1.0/24:draining'));
    const st = await node.status();
    expect(st.ready).to.equal(true);
    expect(st.poolSource?.reasons.join(' ')).to.match(/10\.44\.1\.0\/24 was removed .* stay, no new ones/);
    const [fresh] = await node.attach(`w${seq++}`, ns());
    expect(inBlock(fresh!, '10.44.5.0/24')).to.equal(true);
    // Its address stays with the workload; once every workload of the old range is gone, so is the pool.
    for (let i = 0; i < seq; i++) await node.detach(`w${i}`);
    await eventually(
      'the drained range gone',
      async () => !(await pools()).some((p) => p.startsWith('10.44.1.0/24')),
    );
  });

  it("stand-in API: does not use a Node range that overlaps another network's pool, and Status says why", async () => {
    // The default network's pools come from Node worker-3; the network "second" has static ones.
    api.setNode('worker-3', ['10.44.9.0/24']);
    const other = await Node.start(path.join(root, 'node-3'), api.kubeconfig(), {
      nodeName: 'worker-3',
      networks: [
        { name: 'default', backend: 'linux' },
        { name: 'second', backend: 'linux', podCidrs: ['10.44.9.0/26'] },
      ],
    });
    try {
      const overlap = /podCIDRs entry 10\.44\.9\.0\/24 overlaps pool 10\.44\.9\.0\/26 of network "second"/;
      await eventually('the overlap reported', async () =>
        overlap.test((await other.status()).reasons.join(' ')),
      );
      const st = await other.status();
      expect(st.ready).to.equal(false);
      expect(st.reasons.join(' ')).to.match(/^network default: /);
      expect(st.networks.map((n) => [n.name, n.ready, n.pools.map((p) => p.cidr)])).to.deep.equal([
        ['default', false, []],
        ['second', true, ['10.44.9.0/26']],
      ]);
      // No address of the range from the default network; the second network serves its own.
      const refused = await other.attach('o1', ns()).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(grpcCode(refused), String(refused)).to.equal(grpc.status.UNAVAILABLE);
      const [second] = await other.attach('o2', ns(), 'second');
      expect(inBlock(second!, '10.44.9.0/26')).to.equal(true);

      // The Node gets a range of its own: served, and the reason goes.
      api.setNode('worker-3', ['10.44.8.0/24']);
      await eventually('ready', async () => (await other.status()).ready);
      const [ip] = await other.attach('o1', ns());
      expect(inBlock(ip!, '10.44.8.0/24')).to.equal(true);
    } finally {
      await other.stop();
    }
  });

  it('stand-in API: reconnects with backoff after the API server was down, and goes not ready when the Node is deleted', async () => {
    await api.stop();
    await eventually('disconnected', async () => (await node.status()).poolSource?.connected === false);
    expect((await node.status()).ready, 'keeps serving known ranges').to.equal(true);
    await api.listen();
    api.deleteNode(NODE);
    await eventually('not ready without the Node', async () => {
      const st = await node.status();
      return st.poolSource?.connected === true && !st.ready;
    });
    expect((await node.status()).reasons.join(' ')).to.include(`Node ${NODE} does not exist`);
  });
});
