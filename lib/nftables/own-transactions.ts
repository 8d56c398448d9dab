// Which nf_tables transactions on our table are our own, so that a monitor of the kernel's
// notifications repairs only what someone else changed. The kernel does not say who wrote a
// transaction in a way we can use: NFT_MSG_NEWGEN carries the writer's pid in the *global* pid
// namespace (another number inside a container without hostPID), and each object event the portid of
// the writer's socket, which libnftables does not tell us. So we count: the table expects one
// transaction before each write it makes (taken back if the write fails), and each transaction on our
// table that the monitor hears consumes one expectation, if any; one it cannot pay for is drift.
//
// Why a misattribution costs at most a needless re-read, never a missed drift:
// - Another writer's transaction heard while one of ours is in flight consumes our expectation; ours
//   then finds none and is reported: one re-read, which also sees the other's change.
// - A write of ours that failed but was committed all the same (its answer lost) is heard with no
//   expectation: reported, one re-read.
// - Lost notifications (the socket overflowed) forget every expectation: whatever follows is reported
//   until the counts start afresh.
// - The one way an expectation could outlive its write is a write the kernel commits as no change at
//   all (it sends no notification then): every element we add already there, which happens only when
//   the kernel already differed from what we believed. The kernel queues a transaction's notifications
//   on the monitor's socket before it answers the writer, so an expectation not consumed within
//   SETTLE_MS of its write's end belongs to no transaction, and is dropped: it cannot hide a change
//   made later than that.

/** How long after its write an expectation may still be consumed (the monitor's thread lagging). */
export const SETTLE_MS = 2_000;

/** One expected transaction: settled when the write ends. */
export interface OwnWrite {
  /** The write is done: its transaction is heard shortly, or never (see SETTLE_MS). */
  done(): void;
  /** The write failed: nothing was committed, nothing is heard. */
  failed(): void;
}

export class OwnTransactions {
  /** Per expected transaction, oldest first: until when it may be consumed (Infinity while writing). */
  private pending: { until: number }[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  /** Called before a write that changes the table. */
  expect(): OwnWrite {
    this.expire();
    const entry = { until: Number.POSITIVE_INFINITY };
    this.pending.push(entry);
    return {
      done: () => {
        entry.until = this.now() + SETTLE_MS;
      },
      failed: () => {
        this.pending = this.pending.filter((e) => e !== entry);
      },
    };
  }

  /** A transaction on our table was heard: true when it may be one of ours (an expectation paid). */
  heard(): boolean {
    this.expire();
    return this.pending.shift() !== undefined;
  }

  /** Notifications were lost: which of ours were heard is unknown, so none is expected any more. */
  forget(): void {
    this.pending = [];
  }

  /** Expectations outstanding (writes in flight, or done and not yet heard). */
  get outstanding(): number {
    this.expire();
    return this.pending.length;
  }

  private expire(): void {
    const now = this.now();
    this.pending = this.pending.filter((e) => e.until >= now);
  }
}
