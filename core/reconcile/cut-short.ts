import type { AttachmentRecord } from '../store/attachment-record';

// An attach cut short: the daemon ended (a crash, a SIGKILL, a power loss) between writing the row of
// an attach, marked unfinished, and recording the backend's answer. Its caller was told it failed (the
// call ended without an answer: UNAVAILABLE), so the attachment must not come back live at the next
// start: programming it again would give the node a port, and hold an address, that no runtime knows.
// The row is the daemon's own record of its own unanswered attempt, which is the evidence the rule of
// deleting live state asks for. A row whose dataplane is all there is the exception: the attach had
// finished and was answered (the Linux backend drops the mark after its answer), so it is kept.

/** Start-up's verdict on the rows still marked unfinished. */
export interface UnfinishedRows {
  /** Attaches cut short: removed (dataplane, addresses, row), never repaired. */
  cutShort: AttachmentRecord[];
  /** Attaches that finished before the mark could go: kept, the mark dropped now. */
  finished: AttachmentRecord[];
}

/** Sorts the unfinished rows by what the backends found of their dataplane. */
export function judgeUnfinished(
  rows: readonly AttachmentRecord[],
  missing: ReadonlySet<string>,
): UnfinishedRows {
  const verdict: UnfinishedRows = { cutShort: [], finished: [] };
  for (const rec of rows) {
    if (!rec.unfinished) continue;
    (missing.has(rec.key) ? verdict.cutShort : verdict.finished).push(rec);
  }
  return verdict;
}

/** The line Status and the log carry for the attaches removed. */
export function cutShortWarning(cutShort: readonly AttachmentRecord[]): string {
  const keys = cutShort.map((r) => r.key).sort();
  const shown = keys.slice(0, 10).join(', ') + (keys.length > 10 ? `, and ${keys.length - 10} more` : '');
  return (
    `${keys.length} attach(es) cut short by the daemon's end removed (their callers were told they ` +
    `failed; a retry attaches them afresh): ${shown}`
  );
}
