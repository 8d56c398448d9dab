// How a benchmark run on its own (`node dist/test/bench/<name>.bench.js …`) ends: its rows printed one
// a line and exit 0, or its error printed and exit 1. Its own file because every benchmark that can run
// alone ends the same way, and an exit code is what a script driving it reads.

export interface PrintedRow {
  name: string;
  value: number;
  unit: string;
}

/** `name: value unit`, as run.ts prints a row. */
export const plainRow = (r: PrintedRow): string => `${r.name}: ${r.value} ${r.unit}`;

/** Name and value in columns, the value to two places. */
export const columnRow = (r: PrintedRow): string =>
  `${r.name.padEnd(60)} ${r.value.toFixed(2).padStart(10)} ${r.unit}`;

export function printRowsAndExit<Row extends PrintedRow>(
  rows: Promise<Row[]>,
  format: (r: Row) => string = plainRow,
): void {
  rows.then(
    (done) => {
      for (const r of done) console.log(format(r));
      process.exit(0);
    },
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
