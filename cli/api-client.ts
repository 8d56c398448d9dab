import * as grpc from '@grpc/grpc-js';
import { WorkloadNetworkingClient } from '../proto/gen/workloadnet/v1/workload';

// A promise-style client of the workload API for the CLI (and tests). Every call has a deadline so that
// a wedged daemon turns into an error instead of a hang.

type Unary<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, res?: Res) => void,
) => grpc.ClientUnaryCall;

export class ApiClient {
  readonly raw: WorkloadNetworkingClient;

  constructor(
    socketPath: string,
    private readonly timeoutMs = 30_000,
  ) {
    this.raw = new WorkloadNetworkingClient(`unix:${socketPath}`, grpc.credentials.createInsecure());
  }

  call<Req, Res>(method: Unary<Req, Res>, req: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      method.call(
        this.raw,
        req,
        new grpc.Metadata(),
        { deadline: Date.now() + this.timeoutMs },
        (err, res) => (err ? reject(err) : resolve(res as Res)),
      );
    });
  }

  close(): void {
    this.raw.close();
  }
}

/** Whether an error means "could not reach the daemon" rather than "the daemon said no". */
export function isUnreachable(err: unknown): boolean {
  const code = (err as grpc.ServiceError | undefined)?.code;
  const details = (err as grpc.ServiceError | undefined)?.details ?? '';
  return code === grpc.status.UNAVAILABLE && /connect|ENOENT|ECONNREFUSED|No connection/i.test(details);
}
