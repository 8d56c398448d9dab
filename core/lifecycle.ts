// The daemon's parts start in one order and stop in the reverse, from one list (like containerd's
// plugin graph or Cilium's hive lifecycle, minus the graph: the order here is fixed and short).

/** A part of the daemon that starts with it and stops with it. */
export interface Lifecycle {
  readonly name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** inversify identifier of the endpoints served besides the gRPC API (CNI, metrics); multi-bound. */
export const ENDPOINT = Symbol.for('workloadnet.Endpoint');

/**
 * Starts `parts` in order. If one fails, those already started are stopped in reverse and the failure
 * is thrown, naming the part. Returns the function that stops them all in reverse.
 */
export async function startAll(
  parts: readonly Lifecycle[],
  onStopError: (part: string, err: unknown) => void,
): Promise<() => Promise<void>> {
  const started: Lifecycle[] = [];
  const stopAll = async (): Promise<void> => {
    for (const part of started.splice(0).reverse()) {
      await part.stop().catch((err: unknown) => onStopError(part.name, err));
    }
  };
  for (const part of parts) {
    try {
      await part.start();
    } catch (err) {
      await stopAll();
      throw err;
    }
    started.push(part);
  }
  return stopAll;
}
