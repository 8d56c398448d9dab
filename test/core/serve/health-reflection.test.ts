import { expect } from 'chai';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';
import { recordingDaemon } from '../../support/recording-daemon';

// Standard tooling works against the daemon: the gRPC health service reflects readiness, and server
// reflection lists the workload API (what grpcurl and similar tools use).

type Callback<T> = (err: grpc.ServiceError | null, res?: T) => void;

describe('gRPC health and reflection', () => {
  const rd = recordingDaemon();

  it('serves grpc.health.v1 with SERVING while ready', async () => {
    const Client = grpc.makeGenericClientConstructor(healthService, 'Health');
    const client = new Client(
      `unix:${rd.daemon.config.socket}`,
      grpc.credentials.createInsecure(),
    ) as unknown as {
      check(req: { service: string }, cb: Callback<{ status: string | number }>): void;
      close(): void;
    };
    const res = await new Promise<{ status: string | number }>((resolve, reject) =>
      client.check({ service: 'workloadnet.v1.WorkloadNetworking' }, (err, r) =>
        err || !r ? reject(err) : resolve(r),
      ),
    );
    client.close();
    expect([1, 'SERVING']).to.include(res.status);
  });

  it('lists the workload API through server reflection', async () => {
    const def = protoLoader.loadSync('grpc/reflection/v1alpha/reflection.proto', {
      includeDirs: [require.resolve('@grpc/reflection').replace(/build\/.*$/, 'build/proto')],
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      grpc: { reflection: { v1alpha: { ServerReflection: grpc.ServiceClientConstructor } } };
    };
    const client = new pkg.grpc.reflection.v1alpha.ServerReflection(
      `unix:${rd.daemon.config.socket}`,
      grpc.credentials.createInsecure(),
    );
    const call = (
      client as unknown as {
        serverReflectionInfo(): grpc.ClientDuplexStream<
          object,
          { listServicesResponse?: { service: Array<{ name: string }> } }
        >;
      }
    ).serverReflectionInfo();
    const names = await new Promise<string[]>((resolve, reject) => {
      call.on('data', (m) => {
        resolve((m.listServicesResponse?.service ?? []).map((s: { name: string }) => s.name));
        call.end();
      });
      call.on('error', reject);
      call.write({ listServices: '' });
    });
    client.close();
    expect(names).to.include('workloadnet.v1.WorkloadNetworking');
  });
});
