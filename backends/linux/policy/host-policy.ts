// NetworkPolicy on the Linux backend: our nftables table in the host namespace (the daemon's own, or
// the one given as hostNetnsPath), where every pod's traffic crosses forward between its veth and the
// rest. The ruleset, its diff and its adoption are lib/nftables's, shared with the DPU simulator; this
// is where the backend's namespace is opened and the libnftables context made in it, on first use, so
// a daemon with policy off never loads libnftables.
//
// Drift: once a repair is asked for (onDrift), a monitor of the kernel's nf_tables notifications runs
// beside the table (policy-drift-monitor.ts); a transaction on our table that is not one of ours
// (own-transactions.ts) makes the next apply read the kernel back, and asks for that apply, debounced.

import type {
  CompiledPolicy,
  PolicyDataplane,
  PolicyDenials,
  PolicyTouched,
} from '../../../core/policy-dataplane';
import { silentLogger, type Logger } from '../../../core/logger';
import { NftContext } from '../../../lib/nftables/libnftables';
import { NfElementWriter } from '../../../lib/nftables/nf-elements';
import { OwnTransactions } from '../../../lib/nftables/own-transactions';
import { NftPolicyTable } from '../../../lib/nftables/policy-table';
import { POLICY_TABLE } from '../../../lib/nftables/policy-ruleset';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { RestartingReader } from '../restarting-reader';
import { PolicyDriftMonitor, type PolicyTableEvent } from './policy-drift-monitor';

/** Coalesces a burst of others' transactions (a script of nft commands) into one repair. */
const DRIFT_DEBOUNCE_MS = 100;

export interface HostPolicyOptions {
  logger?: Logger;
}

interface Opened {
  ctx: NftContext;
  elements: NfElementWriter;
  table: NftPolicyTable;
}

export class HostPolicy implements PolicyDataplane {
  readonly where = 'host';
  private opened?: Promise<Opened>;
  private readonly own = new OwnTransactions();
  private repair?: () => void;
  private monitor?: RestartingReader<PolicyDriftMonitor>;
  private debounce?: NodeJS.Timeout;
  /** Transactions on our table heard from someone else (or lost notifications). */
  private drifts = 0;

  /** `hostNetnsPath`: the namespace facing the pods; absent: the process's own. */
  constructor(
    private readonly hostNetnsPath: string | undefined,
    private readonly opts: HostPolicyOptions = {},
  ) {}

  /**
   * Asks for `repair` (an apply of the program in force) whenever someone else changes our table; the
   * table is already invalidated then, so that apply reads the kernel and puts back what differs.
   * Starts the monitor with the table (at once, if it is open).
   */
  onDrift(repair: () => void): void {
    this.repair = repair;
    if (this.opened) this.startMonitor();
  }

  /** Changes to our table heard from others since the start, for tests and Status. */
  get driftsHeard(): number {
    return this.drifts;
  }

  /** Whether the drift monitor is listening. */
  get monitoring(): boolean {
    return this.monitor?.current !== undefined;
  }

  /** Why the drift monitor is down, in words, while it is. */
  monitorDown(): string | undefined {
    return this.monitor?.down();
  }

  /** Whole reads of the table from the kernel since the start. */
  async reads(): Promise<number> {
    return this.opened ? (await this.table()).reads : 0;
  }

  async apply(program: CompiledPolicy, touched?: PolicyTouched): Promise<void> {
    await (await this.table()).apply(program, touched);
  }

  invalidate(): void {
    void this.opened?.then(
      ({ table }) => table.invalidate(),
      () => undefined,
    );
  }

  async denied(): Promise<ReadonlyMap<string, PolicyDenials>> {
    if (!this.opened) return new Map();
    return (await this.table()).denied();
  }

  async remove(): Promise<void> {
    await (await this.table()).remove();
  }

  /** Frees the libnftables context (the backend stops); our table stays in force. */
  async close(): Promise<void> {
    clearTimeout(this.debounce);
    this.debounce = undefined;
    const monitor = this.monitor;
    this.monitor = undefined;
    await monitor?.stop();
    const opened = this.opened;
    this.opened = undefined;
    const held = await opened?.catch(() => undefined);
    await held?.ctx.close();
    await held?.elements.close();
  }

  private async table(): Promise<NftPolicyTable> {
    if (!this.opened) {
      const opening = this.open();
      this.opened = opening;
      // A failure (libnftables missing, namespace gone) is tried again on the next call.
      opening.catch(() => {
        if (this.opened === opening) this.opened = undefined;
      });
      if (this.repair) this.startMonitor();
    }
    return (await this.opened).table;
  }

  private async open(): Promise<Opened> {
    // The sockets keep the namespace alive; the handle is needed only to make them.
    const ns = this.hostNetnsPath === undefined ? undefined : await NetnsHandle.open(this.hostNetnsPath);
    try {
      const ctx = NftContext.open(ns);
      let elements: NfElementWriter;
      try {
        elements = NfElementWriter.open(ns);
      } catch (err) {
        await ctx.close();
        throw err;
      }
      return { ctx, elements, table: new NftPolicyTable(ctx, elements, this.own) };
    } finally {
      ns?.close();
    }
  }

  private startMonitor(): void {
    if (this.monitor) return;
    this.monitor = new RestartingReader({
      what: 'NetworkPolicy drift monitor',
      meanwhile: 'the periodic recheck still repairs',
      logger: this.opts.logger ?? silentLogger(),
      start: async (died) => {
        const ns = this.hostNetnsPath === undefined ? undefined : await NetnsHandle.open(this.hostNetnsPath);
        try {
          return PolicyDriftMonitor.start(ns, POLICY_TABLE, (e) => this.heard(e), died);
        } finally {
          ns?.close();
        }
      },
      // What changed while no monitor listened is known only to a read of the kernel.
      onRestart: () => this.heard({ kind: 'lost' }),
    });
    void this.monitor.begin();
  }

  private heard(e: PolicyTableEvent): void {
    if (e.kind === 'lost') this.own.forget();
    else if (this.own.heard()) return;
    this.drifts++;
    if (this.debounce) return;
    this.debounce = setTimeout(() => {
      this.debounce = undefined;
      void this.opened?.then(
        ({ table }) => table.invalidate(),
        () => undefined,
      );
      this.repair?.();
    }, DRIFT_DEBOUNCE_MS);
    this.debounce.unref();
  }
}
