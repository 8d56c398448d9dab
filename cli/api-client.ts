import * as grpc from '@grpc/grpc-js';
import {
  StatusRequest,
  WorkloadNetworkingClient,
  type StatusResponse,
} from '../proto/gen/workloadnet/v1/workload';

// A promise-style client of the workload API for the CLI (and tests). Every call has a deadline so that
// a wedged daemon turns into an error instead of a hang.

type Unary<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, res?: Res) => void,
) => grpc.ClientUnaryCall;

/** The daemon's send limit (core/serve/api-server.ts: 64 × its 1 MiB request limit). */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

export class ApiClient {
  readonly raw: WorkloadNetworkingClient;

  constructor(
    socketPath: string,
    private readonly timeoutMs = 30_000,
  ) {
    // A List of every attachment is the API's one large answer (about 420 bytes a row): accept what the
    // daemon may send, not grpc-js' default 4 MiB, which 10,000 DPU attachments already exceed.
    this.raw = new WorkloadNetworkingClient(`unix:${socketPath}`, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': MAX_ANSWER_BYTES,
    });
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

  /** Status; `omitFabricPeers` leaves out the fabric's per-peer rows. */
  status(opts: Partial<StatusRequest> = {}): Promise<StatusResponse> {
    return this.call(this.raw.status, StatusRequest.fromPartial(opts));
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

/**
 * grpc-js' words for a failed connection, without what says nothing: it ends them with "Resolution
 * note: " followed by nothing when name resolution had nothing to add.
 */
export function unreachableDetails(details: string): string {
  return details.replace(/\s*Resolution note:\s*$/, '').trim();
}
