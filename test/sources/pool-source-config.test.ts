import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { effectiveConfig } from '../../cli/daemon-command';
import { DEFAULT_CONFIG, type ConfigOverrides } from '../../core/config';
import { mergeConfig } from '../../core/daemon/config-check';
import { WorkloadNetError } from '../../core/errors';
import { IpAllocator } from '../../core/ipam/ip-allocator';
import { silentLogger } from '../../core/logger';
import { KubernetesPoolSource } from '../../sources/kubernetes/kubernetes-pool-source';
import { blockAt, blockIndex, blockLayout, reservedInBlock } from '../../sources/etcd/block-layout';
import { CLI } from '../support/daemon-process';
import { expectError } from '../support/expect-error';

// Configuration of the pool sources: defaults that change nothing, and bad input refused with a
// message that says what to fix.

function rejects(overrides: ConfigOverrides, message: RegExp): void {
  const err = expectError(() => mergeConfig(DEFAULT_CONFIG, overrides), 'INVALID_ARGUMENT', message);
  expect(err).to.be.instanceOf(WorkloadNetError);
}

const etcd = (e: ConfigOverrides['etcd']): ConfigOverrides => ({
  poolSource: 'etcd',
  etcd: { endpoints: ['http://10.0.0.1:2379'], clusterCidrs: ['10.96.0.0/12'], ...e },
});

describe('pool source configuration', () => {
  it('defaults to the static source with the pod CIDR as before', () => {
    const c = effectiveConfig({});
    expect(c.poolSource).to.equal('static');
    expect(c.podCidrs).to.deep.equal(['10.88.0.0/16']);
  });

  it('takes the etcd source from flags', () => {
    const c = effectiveConfig({
      poolSource: 'etcd',
      etcdEndpoints: 'http://10.0.0.1:2379,http://10.0.0.2:2379',
      clusterCidr: ['10.96.0.0/12', 'fd96::/104'],
      blockSize: '24',
      nodeName: 'worker-1',
    });
    expect(c.etcd.endpoints).to.deep.equal(['http://10.0.0.1:2379', 'http://10.0.0.2:2379']);
    expect(c.etcd.clusterCidrs).to.deep.equal(['10.96.0.0/12', 'fd96::/104']);
    expect(c.etcd.blockSize).to.equal(24);
    expect(c.nodeName).to.equal('worker-1');
  });

  it('refuses an unknown source', () => rejects({ poolSource: 'dhcp' as never }, /poolSource must be/));
  it('refuses etcd without endpoints', () => rejects(etcd({ endpoints: [] }), /needs etcd\.endpoints/));
  it('refuses etcd without a cluster CIDR', () =>
    rejects(etcd({ clusterCidrs: [] }), /needs etcd\.clusterCidrs/));
  it('refuses two cluster CIDRs of one family', () =>
    rejects(etcd({ clusterCidrs: ['10.96.0.0/12', '10.128.0.0/12'] }), /two IPv4 ranges/));
  it('refuses a cluster CIDR smaller than one block', () =>
    rejects(etcd({ clusterCidrs: ['10.96.0.0/28'] }), /smaller than one \/26 block/));
  it('refuses a block size out of range', () => rejects(etcd({ blockSize: 31 }), /blockSize must be/));
  it('refuses an endpoint that is not a URL', () =>
    rejects(etcd({ endpoints: ['10.0.0.1:2379'] }), /http\(s\)/));
  it('refuses https endpoints without a CA', () =>
    rejects(etcd({ endpoints: ['https://10.0.0.1:2379'] }), /need etcd\.ca/));
  it('refuses a client certificate without its key', () =>
    rejects(etcd({ ca: '/ca', cert: '/c' }), /cert and etcd\.key go together/));
  it('refuses an invalid node name', () => rejects({ nodeName: 'Worker_1' }, /not a valid node name/));

  it('exits 1 with one clear line when the daemon is started with an incomplete etcd source', () => {
    const r = spawnSync(
      process.execPath,
      [CLI, 'daemon', '--pool-source', 'etcd', '--state-dir', '/nonexistent-x'],
      {
        encoding: 'utf8',
      },
    );
    expect(r.status).to.equal(1);
    expect(r.stderr.trim().split('\n')).to.have.length(1);
    expect(r.stderr).to.match(/needs etcd\.endpoints \(--etcd-endpoints\)/);
  });

  it('cluster commands fail promptly with exit 4 when etcd cannot be reached', () => {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    const r = spawnSync(
      process.execPath,
      [CLI, 'cluster', 'blocks', '--etcd-endpoints', 'http://127.0.0.1:1', '--timeout', '2'],
      { encoding: 'utf8', timeout: 20_000 },
    );
    expect(r.status, r.stderr).to.equal(4);
    expect(r.stderr).to.match(/cannot reach etcd/);
  });

  it('the kubernetes source refuses to start without credentials, saying where they come from', async () => {
    const saved = { k: process.env.KUBECONFIG, h: process.env.KUBERNETES_SERVICE_HOST };
    delete process.env.KUBECONFIG;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      const source = new KubernetesPoolSource({ nodeName: 'n', kubeconfig: '', logger: silentLogger() });
      const err = await source.start(new IpAllocator([])).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((err as WorkloadNetError).code).to.equal('FAILED_PRECONDITION');
      expect((err as Error).message).to.match(
        /--kubeconfig FILE, set \$KUBECONFIG, or run the daemon in a pod/,
      );
      const missing = new KubernetesPoolSource({
        nodeName: 'n',
        kubeconfig: '/nonexistent/kubeconfig',
        logger: silentLogger(),
      });
      const err2 = await missing.start(new IpAllocator([])).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((err2 as Error).message).to.match(/Kubernetes API credentials: .*nonexistent/);
    } finally {
      if (saved.k !== undefined) process.env.KUBECONFIG = saved.k;
      if (saved.h !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved.h;
    }
  });

  it('cluster commands need endpoints', () => {
    const r = spawnSync(process.execPath, [CLI, 'cluster', 'blocks'], { encoding: 'utf8' });
    expect(r.status).to.equal(1);
    expect(r.stderr).to.match(/no etcd endpoints/);
  });
});

describe('etcd block layout', () => {
  it('cuts a cluster CIDR into blocks and finds them again', () => {
    const l = blockLayout('10.96.0.0/22', 26);
    expect(l.count).to.equal(16n);
    expect(blockAt(l, 0n)).to.equal('10.96.0.0/26');
    expect(blockAt(l, 15n)).to.equal('10.96.3.192/26');
    expect(blockIndex(l, '10.96.3.192/26')).to.equal(15n);
    expect(blockIndex(l, '10.96.3.0/25')).to.equal(undefined);
    expect(blockIndex(l, '10.97.0.0/26')).to.equal(undefined);
  });

  it('gives IPv6 blocks as many addresses as IPv4 ones', () => {
    const l = blockLayout('fd96::/104', 26);
    expect(l.blockPrefix).to.equal(122);
    expect(l.blockAddresses).to.equal(64);
    expect(blockAt(l, 1n)).to.equal('fd96::40/122');
  });

  it("withholds only the cluster range's own network and broadcast addresses", () => {
    const l = blockLayout('10.96.0.0/22', 26);
    expect(reservedInBlock(l, '10.96.0.0/26')).to.deep.equal(['10.96.0.0']);
    expect(reservedInBlock(l, '10.96.1.0/26')).to.deep.equal([]);
    expect(reservedInBlock(l, '10.96.3.192/26')).to.deep.equal(['10.96.3.255']);
  });
});
