import type { SoakSample } from './soak.bench';

// The soak's table: its first, middle and last samples side by side, each figure judged against the
// first (what moves with the churn's random walk is shown, not judged).

/** A growth over the first sample beyond this is flagged. */
const GROWTH_FLAG = 0.05;

/** Start, middle and end side by side, and the figures that grew more than 5 % from start to end. */
export function soakTable(samples: SoakSample[]): { table: string[]; flagged: string[] } {
  const first = samples[0];
  const last = samples.at(-1);
  const mid = samples[Math.floor((samples.length - 1) / 2)];
  if (!first || !last || !mid) return { table: [], flagged: [] };
  const rows: Array<[string, (s: SoakSample) => number, number]> = [
    ['daemon RSS (MiB)', (s) => s.rssMiB, 1],
    ['heap used (MiB)', (s) => s.heapUsedMiB, 1],
    [
      'of which compiled code (MiB; V8 compiling more as the churn reaches it: not judged alone)',
      (s) => s.codeMiB,
      1,
    ],
    ['open descriptors', (s) => s.fds, 0],
    ['store file on disk (KiB)', (s) => s.storeKiB, 0],
    ['event-loop p99 since the previous sample (ms)', (s) => s.loopP99Ms, 1],
    ['rows (attachments)', (s) => s.rows, 0],
    ['host veths beyond the rows', (s) => s.leaks.hostLinks, 0],
    ['links left in the detach group', (s) => s.leaks.detachGroupLinks, 0],
    ['simulator ports beyond the rows', (s) => s.leaks.simPorts, 0],
    ['links in the DPU namespace (its free VFs: move with the rows)', (s) => s.leaks.dpuNetnsLinks, 0],
    ['addresses allocated beyond the rows', (s) => s.leaks.addresses, 0],
    ['workload interfaces beyond the rows', (s) => s.leaks.workloadInterfaces, 0],
    ['fabric: peers in the table (those in their grace included)', (s) => s.fabric.peers, 0],
    ['fabric: routes of ours in the node namespace (proto 119)', (s) => s.fabric.kernelRoutes, 0],
    ["fabric: objects in the agent's state file", (s) => s.fabric.simObjects, 0],
    ['fabric: peers beyond the file and the grace', (s) => s.fabric.leaks.peers, 0],
    ["fabric: routes beyond the table's prefixes", (s) => s.fabric.leaks.kernelRoutes, 0],
    ["fabric: agent objects beyond the daemon's desired", (s) => s.fabric.leaks.simObjects, 0],
  ];
  const table = [
    `| figure | start (${first.atMin.toFixed(0)} min) | middle (${mid.atMin.toFixed(0)} min) | end (${last.atMin.toFixed(0)} min) | end/start |`,
    '|---|---|---|---|---|',
  ];
  const flagged: string[] = [];
  for (const [name, f, digits] of rows) {
    const [a, b, c] = [f(first), f(mid), f(last)];
    const growth = a > 0 ? c / a - 1 : c > 0 ? Infinity : 0;
    // Rows move with the churn's random walk: what matters is that nothing else departs from them.
    const judged =
      !name.startsWith('rows') && !name.includes('move with the rows') && !name.includes('not judged');
    const flag =
      judged && (growth > GROWTH_FLAG || (a === 0 && c > 0) || (name.includes('beyond') && c !== 0));
    if (flag) flagged.push(`${name}: ${a.toFixed(digits)} → ${c.toFixed(digits)}`);
    const ratio = a > 0 ? `${(c / a).toFixed(3)}` : c === 0 ? '–' : 'new';
    table.push(
      `| ${name} | ${a.toFixed(digits)} | ${b.toFixed(digits)} | ${c.toFixed(digits)} | ${ratio}${flag ? ' **⚑**' : ''} |`,
    );
  }
  return { table, flagged };
}
