import type { Drift, IpAssignment } from '../../core/backend';
import { WorkloadNetError, alreadyExists, invalidArgument, notFound } from '../../core/errors';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import type {
  AttachCall,
  Attachment,
  DetachCall,
  GcResult,
  ServiceStatus,
  SweepResult,
  WorkloadService,
} from '../../core/workload-service';

/**
 * An in-memory WorkloadService with the orchestrator's documented semantics (idempotent attach per
 * key, ALREADY_EXISTS for another netns, tolerant detach, GC keeps exactly the named attachments).
 * The CNI forwarder benchmark alone uses it, so that its figures are the adapter path's cost and not the
 * store's or the allocator's; the tests serve the CNI endpoint from the real service (an in-process
 * daemon with the recording backend, see test/adapters/cni/).
 */
export class FakeWorkloadService implements WorkloadService {
  readonly attachments = new Map<string, Attachment>();
  /** Every call that could change state, in order: "attach a/eth0", "detach a/eth0", "gc". */
  readonly mutations: string[] = [];
  /** Every attach call as received, to check what the adapter passed on. */
  readonly attachCalls: AttachCall[] = [];
  ready = true;
  reasons: string[] = [];
  /** Drift that check() reports per key. */
  readonly drift = new Map<string, Drift[]>();
  /** Thrown by the next call of any method, then cleared. */
  failNext: WorkloadNetError | undefined;
  private nextHost = 2;

  constructor(private readonly defaultMtu = 1500) {}

  private takeFailure(): void {
    const f = this.failNext;
    this.failNext = undefined;
    if (f) throw f;
  }

  async attach(call: AttachCall): Promise<Attachment> {
    this.takeFailure();
    if (!call.netnsPath) throw invalidArgument('netnsPath is required');
    // Like the real service: the namespace is opened and checked before the call goes any further.
    (await NetnsHandle.open(call.netnsPath, { workload: true })).close();
    this.attachCalls.push(call);
    const key = `${call.workloadId}/${call.ifName}`;
    const existing = this.attachments.get(key);
    if (existing) {
      if (existing.netnsPath !== call.netnsPath) {
        throw alreadyExists(`${key} is attached in ${existing.netnsPath}, not ${call.netnsPath}`);
      }
      return existing;
    }
    this.mutations.push(`attach ${key}`);
    const n = this.nextHost++;
    const ips: IpAssignment[] = [
      {
        family: 4,
        address: `10.88.${n >> 8}.${n & 255}`,
        gateway: '169.254.1.1',
      },
      {
        family: 6,
        address: `fd00::${n.toString(16)}`,
        gateway: 'fe80::1',
      },
    ];
    const mtu = call.mtu ?? this.defaultMtu;
    const att: Attachment = {
      key,
      workloadId: call.workloadId,
      ifName: call.ifName,
      netnsPath: call.netnsPath,
      ips,
      mtu,
      backend: 'fake',
      dataplane: {
        ifName: call.ifName,
        mac: `02:00:00:00:${(n >> 8).toString(16).padStart(2, '0')}:${(n & 255).toString(16).padStart(2, '0')}`,
        mtu,
        hostIfName: `wn${n.toString(16).padStart(8, '0')}`,
        routes: [
          { destination: '0.0.0.0/0', gateway: '169.254.1.1' },
          { destination: '::/0', gateway: 'fe80::1' },
        ],
      },
      state: 'ready',
      createdAt: new Date(0).toISOString(),
    };
    if (call.containerId) att.containerId = call.containerId;
    if (call.pod) att.pod = call.pod;
    if (call.dns) att.dns = call.dns;
    this.attachments.set(key, att);
    return att;
  }

  async detach(call: DetachCall): Promise<void> {
    this.takeFailure();
    for (const [key, att] of this.attachments) {
      if (att.workloadId !== call.workloadId) continue;
      if (call.ifName && att.ifName !== call.ifName) continue;
      this.attachments.delete(key);
      this.mutations.push(`detach ${key}`);
    }
  }

  async status(): Promise<ServiceStatus> {
    this.takeFailure();
    return {
      ready: this.ready,
      reasons: this.reasons,
      backend: 'fake',
      backendDetails: {},
      pools: [{ cidr: '10.88.0.0/16', family: 4, size: 65534, used: this.attachments.size }],
      attachments: this.attachments.size,
    };
  }

  async list(): Promise<Attachment[]> {
    this.takeFailure();
    return [...this.attachments.values()];
  }

  async listPage(after: string | undefined, limit: number): Promise<Attachment[]> {
    this.takeFailure();
    const sorted = [...this.attachments.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    return sorted.filter((a) => after === undefined || a.key > after).slice(0, limit);
  }

  async get(workloadId: string, ifName?: string): Promise<Attachment[]> {
    this.takeFailure();
    const found = [...this.attachments.values()].filter(
      (a) => a.workloadId === workloadId && (!ifName || a.ifName === ifName),
    );
    if (found.length === 0) throw notFound(`no attachment for ${workloadId}${ifName ? `/${ifName}` : ''}`);
    return found;
  }

  async check(workloadId: string, ifName: string): Promise<Drift[]> {
    this.takeFailure();
    const key = `${workloadId}/${ifName}`;
    if (!this.attachments.has(key)) throw notFound(`no attachment ${key}`);
    return this.drift.get(key) ?? [];
  }

  async gc(keep: Array<{ workloadId: string; ifName?: string }>): Promise<GcResult> {
    this.takeFailure();
    this.mutations.push('gc');
    const removed: string[] = [];
    for (const [key, att] of this.attachments) {
      const kept = keep.some(
        (k) => k.workloadId === att.workloadId && (!k.ifName || k.ifName === att.ifName),
      );
      if (!kept) {
        this.attachments.delete(key);
        removed.push(key);
      }
    }
    return { removed };
  }

  async sweep(): Promise<SweepResult> {
    return { released: [], suspected: [] };
  }
}
