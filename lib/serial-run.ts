// Work that must not overlap with itself, where a call that comes while it runs means "once more
// afterwards" (a file changed again while it was being read, a table changed while it was applied):
// one further run covers any number of such calls, and every caller waits for a run that began after
// its call.

export class SerialRun {
  private running?: Promise<void>;
  private again = false;

  constructor(
    private readonly work: () => Promise<void>,
    /** Checked before each further run: once it says stop, no run follows the one in progress. */
    private readonly stopped: () => boolean = () => false,
  ) {}

  /** Runs the work now, or once more after the run in progress; resolves when that is done. */
  run(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.work();
      } while (this.again && !this.stopped());
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  /** The run in progress, if any (stop waits for it). */
  get current(): Promise<void> | undefined {
    return this.running;
  }
}
