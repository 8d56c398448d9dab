import * as fs from 'node:fs';

// What one mocha process reports back to the lane runner, through a JSON file the reporter writes at the
// end of its run (a file rather than stdout, so the test output itself stays free-form text).

/** Counts and wall time of one test file inside a lane. */
export interface FileResult {
  /** Path as mocha was given it (dist/test/….test.js). */
  file: string;
  ms: number;
  passes: number;
  failures: number;
  pending: number;
}

export interface LaneResult {
  passes: number;
  failures: number;
  pending: number;
  files: FileResult[];
  /** Full titles of the tests that passed, to compare one run's list with another's. */
  passed: string[];
  /** Full titles of the tests and hooks that failed. */
  failed: string[];
}

/** Env var naming the file the reporter writes its LaneResult to. */
export const RESULT_FILE_ENV = 'WORKLOADNET_LANE_RESULT';

function isNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

function isStrings(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((s) => typeof s === 'string');
}

function isFileResult(v: unknown): v is FileResult {
  const f = v as Partial<FileResult> | null;
  return (
    typeof f === 'object' &&
    f !== null &&
    typeof f.file === 'string' &&
    isNumber(f.ms) &&
    isNumber(f.passes) &&
    isNumber(f.failures) &&
    isNumber(f.pending)
  );
}

/** Reads a LaneResult; undefined when the file is missing or not one (the process died before its end). */
export function readLaneResult(file: string): LaneResult | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
  const r = parsed as Partial<LaneResult> | null;
  if (
    typeof r !== 'object' ||
    r === null ||
    !isNumber(r.passes) ||
    !isNumber(r.failures) ||
    !isNumber(r.pending) ||
    !Array.isArray(r.files) ||
    !r.files.every(isFileResult) ||
    !isStrings(r.passed) ||
    !isStrings(r.failed)
  )
    return undefined;
  return r as LaneResult;
}
