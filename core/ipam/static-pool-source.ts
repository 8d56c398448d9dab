import type { IpAllocator } from './ip-allocator';
import type { PoolSource } from './pool-source';
import type { PoolSourceStatus } from '../workload-service';

// The configured podCidrs, as every node had them before pool sources existed. The allocator is built
// with those pools (core/daemon/container.ts), so this source has nothing to add and nothing to wait for; it
// lives in core because it is that small and because it is the default.

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
