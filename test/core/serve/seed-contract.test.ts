import { expect } from 'chai';
import * as grpc from '@grpc/grpc-js';
import { WorkloadNetworkingClient as SeedClient } from '../../../proto/gen/metropolis/node/core/network/workloads/workloads';
import { recordingDaemon } from '../../support/recording-daemon';
import { StandInNamespaces } from '../../support/stand-in-netns';

// A client generated from an unchanged copy of the original three-call contract must work against the
// daemon, which serves that service name as well as its own. The recording backend enters no namespace,
// so stand-ins serve.

describe('original workload contract (metropolis.node.core.network.workloads)', () => {
  const namespaces = new StandInNamespaces();
  let seed: SeedClient;
  let netnsPath: string;

  before(() => (netnsPath = namespaces.add().path));
  after(() => namespaces.cleanup());
  afterEach(() => seed.close()); // registered first, so that the client goes before its daemon
  const rec = recordingDaemon({ each: true, netns: namespaces });
  beforeEach(
    () => (seed = new SeedClient(`unix:${rec.daemon.config.socket}`, grpc.credentials.createInsecure())),
  );

  const call = <Res>(fn: (cb: (err: grpc.ServiceError | null, res: Res) => void) => void): Promise<Res> =>
    new Promise((resolve, reject) => fn((err, res) => (err ? reject(err) : resolve(res))));

  it('attaches, repeats idempotently and detaches through the original service name', async () => {
    const req = { workloadId: 'seed-1', netns: { netnsPath, ifName: 'eth0' } };
    const first = await call<{ ip: Buffer[] }>((cb) => seed.attach(req, cb));
    expect(first.ip).to.have.length(1);
    expect(first.ip[0]?.length).to.equal(4);
    const again = await call<{ ip: Buffer[] }>((cb) => seed.attach(req, cb));
    expect(Buffer.compare(again.ip[0] as Buffer, first.ip[0] as Buffer)).to.equal(0);
    await call((cb) => seed.detach(req, cb));
    expect(rec.backend.programmed.size).to.equal(0);
  });

  it('answers Status with OK when ready and UNAVAILABLE with the reason when not', async () => {
    await call((cb) => seed.status({}, cb));
    rec.backend.healthy = false;
    try {
      await call((cb) => seed.status({}, cb));
      expect.fail('Status should fail while not ready');
    } catch (err) {
      expect((err as grpc.ServiceError).code).to.equal(grpc.status.UNAVAILABLE);
      expect((err as grpc.ServiceError).details).to.include('recording backend set unhealthy');
    }
  });
});
