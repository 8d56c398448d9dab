import * as grpc from '@grpc/grpc-js';
import type { ApiClient } from '../../cli/api-client';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { attachRequest, detachRequest } from './attach-request';
import { outcome, type Outcome } from './grpc-outcome';
import type { NetnsSet } from './netns';

// Attach/detach churn through the workload API for the torture tests: workers attach (six times in
// ten) or detach random workloads until stopped, count what went through, and leave every failure to
// the test to judge, since whether a failure is a bug depends on what the test is doing to the daemon.

/** A workload of the churn: its id and the test-owned namespace it is attached in. */
export interface ChurnWorkload {
  id: string;
  ns: { name: string; path: string };
}

/** The churn's random choices: the torture tests' seeded generator, so that a run can be replayed. */
export interface ChurnChoices {
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
}

/** What the churn went through; a test's own tally extends it. */
export interface ChurnCounts {
  attachOk: number;
  attachFailed: number;
  detachOk: number;
  detachFailed: number;
}

export interface ChurnOptions {
  client: ApiClient;
  workloads: ChurnWorkload[];
  choices: ChurnChoices;
  workers: number;
  counts: ChurnCounts;
  /**
   * What is wrong with a failed call (`what` names it, e.g. "attach tl-3"), or undefined when the
   * failure is expected at this moment; `stopping` says whether stop() was called.
   */
  judgeFailure(what: string, failure: Outcome<unknown>, stopping: boolean): string | undefined;
  /** What is wrong with a successful Attach's answer, if anything. */
  judgeAttached?(what: string, res: AttachResponse): string | undefined;
}

export class AttachChurn {
  /** What the judges found wrong, one line each. */
  readonly unexpected: string[] = [];
  /** Settles when every worker has stopped. */
  readonly done: Promise<void>;
  private stopping = false;

  /** `count` workloads `<prefix>0`, `<prefix>1`, …, each in a namespace of its own from `namespaces`. */
  static workloads(namespaces: NetnsSet, prefix: string, count: number): ChurnWorkload[] {
    return Array.from({ length: count }, (_, i) => ({ id: `${prefix}${i}`, ns: namespaces.add() }));
  }

  /** The counts as the torture tests print them. */
  static summary(c: ChurnCounts): string {
    return `attaches ok/failed ${c.attachOk}/${c.attachFailed}, detaches ok/failed ${c.detachOk}/${c.detachFailed}`;
  }

  constructor(private readonly o: ChurnOptions) {
    this.done = Promise.all(Array.from({ length: o.workers }, () => this.worker())).then(() => undefined);
  }

  /** Workers finish the call they are in, then stop. */
  stop(): void {
    this.stopping = true;
  }

  private async worker(): Promise<void> {
    const { client, counts, choices } = this.o;
    while (!this.stopping) {
      const w = choices.pick(this.o.workloads);
      if (choices.chance(0.6)) {
        const what = `attach ${w.id}`;
        const r = await outcome(client.call(client.raw.attach, attachRequest(w.id, w.ns.path)));
        if (r.code !== grpc.status.OK) {
          counts.attachFailed++;
          this.note(this.o.judgeFailure(what, r, this.stopping));
        } else {
          counts.attachOk++;
          if (r.value) this.note(this.o.judgeAttached?.(what, r.value));
        }
      } else {
        const what = `detach ${w.id}`;
        const r = await outcome(client.call(client.raw.detach, detachRequest(w.id, w.ns.path)));
        if (r.code !== grpc.status.OK) {
          counts.detachFailed++;
          this.note(this.o.judgeFailure(what, r, this.stopping));
        } else counts.detachOk++;
      }
    }
  }

  private note(problem: string | undefined): void {
    if (problem !== undefined) this.unexpected.push(problem);
  }
}
