import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { PoolSource } from '../../core/ipam/pool-source';
import type { PoolSourceStatus } from '../../core/workload-service';

// The configured podCidrs, as every node had them before pool sources existed. The allocator is built
// with those pools (core/daemon/container.ts), so this source has nothing to add and nothing to wait
// for. It is the default network's source unless another is configured, and every other network's.

export class StaticPoolSource implements PoolSource {
  readonly kind = 'static';

  families(): undefined {
    return undefined;
  }

  async start(_allocator: IpAllocator): Promise<void> {}

  isReady(): boolean {
    return true;
  }

  status(): PoolSourceStatus {
    return { kind: this.kind, ready: true, connected: true, reasons: [] };
  }

  async stop(): Promise<void> {}
}
