import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AttachChurn, type ChurnCounts, type ChurnOptions, type ChurnWorkload } from './attach-churn';
import type { DaemonProcess } from './daemon-process';
import { NetnsSet } from './netns';
import { SeededRandom } from './seeded-random';

// What a torture test stands on: a scratch directory, test-owned namespaces (one per workload, and
// whatever else the test adds), the daemon under test, a seeded random source for every choice, and
// the tally of what it survived, printed with the seed when the run ends so that it can be replayed.

export interface TortureRigOptions<T extends ChurnCounts> {
  /** Names the scratch directory and the summary line, e.g. "torture-linux". */
  name: string;
  /** The seed a replay needs (WORKLOADNET_TORTURE_SEED). */
  seed: number;
  /** Varies the random sequence per test while one seed still replays them all. */
  stream?: number;
  /** The test's tally, starting at zero; the churn counts into it. */
  tally: T;
  /** Concurrent churn workers. */
  workers: number;
}

export class TortureRig<T extends ChurnCounts> {
  readonly namespaces = new NetnsSet('wnr-');
  readonly rnd: SeededRandom;
  readonly tally: T;
  dir = '';
  workloads: ChurnWorkload[] = [];
  /** The daemon under test, SIGKILLed at tear-down if it still runs. */
  daemon: DaemonProcess | undefined;

  constructor(private readonly o: TortureRigOptions<T>) {
    this.rnd = new SeededRandom(o.seed ^ (o.stream ?? 0));
    this.tally = o.tally;
  }

  /** Makes the scratch directory and `count` workloads `<prefix>N`, each in a namespace of its own. */
  setUp(workloadPrefix: string, count: number): void {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `wnr-${this.o.name}-`));
    this.workloads = AttachChurn.workloads(this.namespaces, workloadPrefix, count);
  }

  /** Attach/detach churn through `d`'s API over the rig's workloads, judged by the test. */
  churn(d: DaemonProcess, judges: Pick<ChurnOptions, 'judgeFailure' | 'judgeAttached'>): AttachChurn {
    return new AttachChurn({
      client: d.client,
      workloads: this.workloads,
      choices: this.rnd,
      workers: this.o.workers,
      counts: this.tally,
      ...judges,
    });
  }

  /**
   * SIGKILLs the daemon, deletes the namespaces and the scratch directory, and prints what the run
   * survived: `kills`, the churn's counts, then `more`.
   */
  async tearDown(kills: string, more: string): Promise<void> {
    await this.daemon?.kill('SIGKILL').catch(() => undefined);
    this.namespaces.cleanup();
    if (this.dir) fs.rmSync(this.dir, { recursive: true, force: true });
    console.log(
      `      ${this.o.name} (seed ${this.o.seed}): ${kills}, ${AttachChurn.summary(this.tally)}, ${more}`,
    );
  }
}
