// Human tables and JSON for the read commands. Tables are plain aligned columns (like ctr and calicoctl)
// so they stay greppable; --json prints the API's own shape.

export function table(headers: string[], rows: string[][]): string {
  const widths = columnWidths(headers, rows);
  return [headers, ...rows].map((cells) => tableLine(cells, widths)).join('\n') + '\n';
}

export function json(value: unknown): string {
  return JSON.stringify(value, withoutBuffers, 2) + '\n';
}

/** Where a streaming writer puts its text: process.stdout, or a test's collector. */
export interface TextSink {
  /** False when the sink's buffer is full: write more only after 'drain'. */
  write(text: string): boolean;
}

/**
 * A table printed as its rows arrive. Columns are sized by the first `sizeBy` rows (held until then, or
 * until the end): a table of up to that many rows prints exactly as `table` does. A later, wider cell
 * widens its column from that row on, so a long listing stays readable without holding every row.
 */
export class StreamedTable {
  private held: string[][] | undefined = [];
  private widths: number[];

  constructor(
    private readonly out: TextSink,
    private readonly headers: string[],
    private readonly sizeBy = 256,
  ) {
    this.widths = headers.map((h) => h.length);
  }

  /** The sink's answer for what was written: false means wait for it to drain. */
  row(cells: string[]): boolean {
    if (this.held) {
      this.held.push(cells);
      return this.held.length < this.sizeBy || this.flushHeld();
    }
    this.widths = columnWidths(this.headers, [cells], this.widths);
    return this.out.write(tableLine(cells, this.widths) + '\n');
  }

  end(): void {
    if (this.held) this.flushHeld();
  }

  private flushHeld(): boolean {
    const held = this.held ?? [];
    this.held = undefined;
    this.widths = columnWidths(this.headers, held, this.widths);
    return this.out.write(
      [this.headers, ...held].map((cells) => tableLine(cells, this.widths) + '\n').join(''),
    );
  }
}

/**
 * A JSON array printed an element at a time: the same text `json` prints for the whole array, so that
 * `--json` output stays one document. An array that is never ended (the listing failed half-way) is
 * left open, and so is not valid JSON: a reader cannot take part of a listing for all of it.
 */
export class StreamedJsonArray {
  private count = 0;

  constructor(private readonly out: TextSink) {}

  element(value: unknown): boolean {
    // JSON.stringify of an array indents each element one level and separates them with ",\n".
    const text = JSON.stringify(value, withoutBuffers, 2).replace(/\n/g, '\n  ');
    return this.out.write(`${this.count++ === 0 ? '[\n' : ',\n'}  ${text}`);
  }

  end(): void {
    this.out.write(this.count === 0 ? '[]\n' : '\n]\n');
  }
}

/** "3m", "2h", "5d": the age column of ls. */
export function age(since: string, now = Date.now()): string {
  const s = Math.max(0, Math.floor((now - Date.parse(since)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** The API's raw byte fields (Buffers) are left out of JSON output; commands print them as text. */
function withoutBuffers(_key: string, value: unknown): unknown {
  return Buffer.isBuffer(value) ? undefined : value;
}

function columnWidths(headers: string[], rows: string[][], from: number[] = []): number[] {
  return headers.map((h, i) => Math.max(from[i] ?? 0, h.length, ...rows.map((r) => (r[i] ?? '').length)));
}

function tableLine(cells: string[], widths: number[]): string {
  return cells
    .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
    .join('   ')
    .trimEnd();
}
