// Human tables and JSON for the read commands. Tables are plain aligned columns (like ctr and calicoctl)
// so they stay greppable; --json prints the API's own shape.

export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('   ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

export function json(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (Buffer.isBuffer(v) ? undefined : v), 2) + '\n';
}

/** "3m", "2h", "5d": the age column of ls. */
export function age(since: string, now = Date.now()): string {
  const s = Math.max(0, Math.floor((now - Date.parse(since)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}
