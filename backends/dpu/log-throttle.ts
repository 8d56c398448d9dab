// Logs the first few occurrences of a noisy event and then every thousandth, so that an agent sending
// garbage in a loop cannot turn the daemon's log into the bottleneck.

export class LogThrottle {
  private readonly counts = new Map<string, number>();

  /** The occurrence number when this one should be logged, otherwise undefined. */
  occurrence(kind: string): number | undefined {
    const n = (this.counts.get(kind) ?? 0) + 1;
    this.counts.set(kind, n);
    return n <= 10 || n % 1000 === 0 ? n : undefined;
  }
}
