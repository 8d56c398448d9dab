import type { AttachmentKey } from '../attachment-key';
import type {
  AttachCall,
  Attachment,
  DetachCall,
  GcResult,
  PodPolicyView,
  ServiceStatus,
  StatusOptions,
  SweepResult,
  WorkloadService,
} from '../workload-service';
import { failedPrecondition } from '../errors';

// The daemon binds its sockets before its backend starts and its store is reconciled, so that a
// runtime calling during a restart finds a socket that answers (the forwarder waits out a missing or
// refusing socket, but a daemon that binds late makes every restart a window of failed pod starts).
// Until start-up is done the gate holds calls and answers them when it opens; Status answers at once,
// not ready, saying why.

export class ServiceGate implements WorkloadService {
  private opened = false;
  private readonly ready: Promise<void>;
  private release!: () => void;
  private resolved?: WorkloadService;

  constructor(
    /** The service behind the gate; resolved only once the gate opens. */
    private readonly resolve: () => WorkloadService,
  ) {
    this.ready = new Promise((resolve) => (this.release = resolve));
  }

  /**
   * Resolved once and kept: asking the container on every call cost tens of microseconds of the event
   * loop per call (a measurable share of a burst's longest stall).
   */
  private target(): WorkloadService {
    this.resolved ??= this.resolve();
    return this.resolved;
  }

  /** Start-up is done: held calls proceed, new ones go straight through. */
  open(): void {
    this.opened = true;
    this.release();
  }

  private async through<T>(call: (s: WorkloadService) => Promise<T>): Promise<T> {
    if (!this.opened) await this.ready;
    return call(this.target());
  }

  attach(call: AttachCall): Promise<Attachment> {
    return this.through((s) => s.attach(call));
  }

  detach(call: DetachCall): Promise<void> {
    return this.through((s) => s.detach(call));
  }

  async status(opts?: StatusOptions): Promise<ServiceStatus> {
    if (this.opened) return this.target().status(opts);
    return {
      ready: false,
      reasons: ['starting: the backend and the start-up reconcile are not done yet; calls wait for them'],
      backend: '',
      backendDetails: {},
      pools: [],
      attachments: 0,
    };
  }

  list(): Promise<Iterable<Attachment>> {
    return this.through((s) => s.list());
  }

  listPage(after: AttachmentKey | undefined, limit: number): Promise<Attachment[]> {
    return this.through((s) => s.listPage(after, limit));
  }

  get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    return this.through((s) => s.get(workloadId, ifName));
  }

  check(workloadId: string, ifName: string): ReturnType<WorkloadService['check']> {
    return this.through((s) => s.check(workloadId, ifName));
  }

  gc(
    keep: Array<{ workloadId: string; ifName?: string }>,
    origin?: string,
    network?: string,
  ): Promise<GcResult> {
    return this.through((s) => s.gc(keep, origin, network));
  }

  sweep(dryRun: boolean): Promise<SweepResult> {
    return this.through((s) => s.sweep(dryRun));
  }

  policy(namespace: string, pod: string): Promise<PodPolicyView[]> {
    return this.through((s) => {
      if (!s.policy) throw failedPrecondition('NetworkPolicy is off on this node (networkPolicy)');
      return s.policy(namespace, pod);
    });
  }
}
