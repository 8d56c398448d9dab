import type { Endpoint, Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { VfSlot } from './vf-pool';

// The simulator's own port table: what it believes it has programmed. It is deliberately separate from
// anything the daemon holds, so that tests can see the two disagree and converge.

export interface PortEntry {
  port: Port;
  /** The host-side netdev, when the dataplane created one. */
  endpoint?: Endpoint;
  /** The DPU-side interface of the port, when the dataplane created one. */
  representor?: string;
  /** The VF the port holds. */
  vf?: VfSlot;
}

export class PortTable {
  private readonly ports = new Map<string, PortEntry>();

  /** `maxPorts` 0 means no limit. */
  constructor(readonly maxPorts: number) {}

  get(name: string): PortEntry | undefined {
    return this.ports.get(name);
  }

  has(name: string): boolean {
    return this.ports.has(name);
  }

  /** Whether one more port (not already held) fits. */
  hasRoomFor(name: string): boolean {
    return this.maxPorts === 0 || this.ports.has(name) || this.ports.size < this.maxPorts;
  }

  set(entry: PortEntry): void {
    this.ports.set(entry.port.name, entry);
  }

  delete(name: string): PortEntry | undefined {
    const e = this.ports.get(name);
    this.ports.delete(name);
    return e;
  }

  names(): string[] {
    return [...this.ports.keys()];
  }

  get size(): number {
    return this.ports.size;
  }

  /** Entries ordered by name, as the state file shows them. */
  entries(): PortEntry[] {
    return [...this.ports.values()].sort((a, b) =>
      a.port.name < b.port.name ? -1 : a.port.name > b.port.name ? 1 : 0,
    );
  }
}
