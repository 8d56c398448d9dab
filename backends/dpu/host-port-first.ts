import { HOST_PORT_WORKLOAD_ID } from '../../core/attach/host-port-row';

// The host port (core/host-port/host-port.ts) is the node's own way into the overlay: after a DPU
// reboot every host → pod packet waits for it, so it goes first wherever ports are taken in turn (the
// snapshot, the re-plumbing of re-created VFs).

const PREFIX = `${HOST_PORT_WORKLOAD_ID}/`;

/** Whether a port (named by its attachment key) is the host port. */
export function isHostPortName(name: string): boolean {
  return name.startsWith(PREFIX);
}

/** The same items, the host port's first; the rest keep their order. */
export function hostPortFirst<T>(items: readonly T[], nameOf: (item: T) => string): T[] {
  const first = items.filter((i) => isHostPortName(nameOf(i)));
  return first.length === 0 ? [...items] : [...first, ...items.filter((i) => !isHostPortName(nameOf(i)))];
}
