import * as fs from 'node:fs';
import * as path from 'node:path';
import Mocha from 'mocha';
import { RESULT_FILE_ENV, type FileResult, type LaneResult } from './lane-result';

// The mocha reporter of a lane's process. Several lanes write to one terminal at once, so a suite's lines
// are held until its top-level `describe` ends and written in one piece (what the spec reporter would
// have printed, without colours); failures are listed in full at the end, as the spec reporter does.
// The counts, per-file times and titles go to the file named by WORKLOADNET_LANE_RESULT for the runner.

const {
  EVENT_RUN_END,
  EVENT_SUITE_BEGIN,
  EVENT_SUITE_END,
  EVENT_TEST_FAIL,
  EVENT_TEST_PASS,
  EVENT_TEST_PENDING,
} = Mocha.Runner.constants;

class FileReporter extends Mocha.reporters.Base {
  private readonly files = new Map<string, FileResult>();
  private readonly started = new Map<Mocha.Suite, number>();
  private readonly passed: string[] = [];
  private readonly failed: string[] = [];
  private block: string[] = [];
  private depth = 0;

  constructor(runner: Mocha.Runner, options?: Mocha.MochaOptions) {
    super(runner, options);
    runner.on(EVENT_SUITE_BEGIN, (suite) => this.suiteBegin(suite));
    runner.on(EVENT_SUITE_END, (suite) => this.suiteEnd(suite));
    runner.on(EVENT_TEST_PASS, (test) => {
      this.fileOf(test).passes++;
      this.passed.push(test.fullTitle());
      const slow = (test.duration ?? 0) > test.slow() ? ` (${test.duration}ms)` : '';
      this.line(`${Mocha.reporters.Base.symbols.ok} ${test.title}${slow}`);
    });
    runner.on(EVENT_TEST_PENDING, (test) => {
      this.fileOf(test).pending++;
      this.line(`- ${test.title}`);
    });
    runner.on(EVENT_TEST_FAIL, (test, err: unknown) => {
      this.fileOf(test).failures++;
      this.failed.push(test.fullTitle());
      this.line(`${this.failures.length}) ${test.title}`);
      // The first line of the error where the test is, so that a failure reads without the list at the end.
      const first = (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
      this.line(`   ${first.slice(0, 300)}`);
    });
    runner.once(EVENT_RUN_END, () => this.end());
  }

  private suiteBegin(suite: Mocha.Suite): void {
    if (suite.root) return;
    if (suite.parent?.root) this.started.set(suite, Date.now());
    this.line(suite.title);
    this.depth++;
  }

  private suiteEnd(suite: Mocha.Suite): void {
    if (suite.root) return;
    this.depth--;
    const began = this.started.get(suite);
    if (began === undefined) return;
    this.fileOf(suite).ms += Date.now() - began;
    this.flush();
  }

  private line(text: string): void {
    this.block.push(`${'  '.repeat(this.depth + 1)}${text}`);
  }

  private flush(): void {
    if (this.block.length > 0) process.stdout.write(`\n${this.block.join('\n')}\n`);
    this.block = [];
  }

  private fileOf(r: Mocha.Runnable | Mocha.Suite): FileResult {
    const file = path.relative(process.cwd(), r.file ?? r.parent?.file ?? '(no file)');
    let f = this.files.get(file);
    if (!f) {
      f = { file, ms: 0, passes: 0, failures: 0, pending: 0 };
      this.files.set(file, f);
    }
    return f;
  }

  private end(): void {
    this.flush();
    if (this.failures.length > 0) Mocha.reporters.Base.list(this.failures);
    const out = process.env[RESULT_FILE_ENV];
    if (!out) return;
    const files = [...this.files.values()];
    const sum = (k: 'passes' | 'failures' | 'pending'): number => files.reduce((n, f) => n + f[k], 0);
    const result: LaneResult = {
      passes: sum('passes'),
      failures: sum('failures'),
      pending: sum('pending'),
      files,
      passed: this.passed,
      failed: this.failed,
    };
    fs.writeFileSync(out, JSON.stringify(result));
  }
}

export = FileReporter;
