import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PassThrough } from 'node:stream';
import { fill } from './balance';
import { classify } from './classify';
import { startMocha } from './mocha-child';
import { planLanes } from './plan';
import { summarize } from './summary';
import { waitUntil } from '../support/wait-until';

// The lane runner: a file's lane follows from what it loads, a moved module is an error rather than a
// silent move to the shared workers, and a failing or crashed lane fails the whole run.

const ROOT = path.resolve(__dirname, '..', '..', '..');
const FIXTURES = path.join(__dirname, 'fixtures');

/** A repository in a temporary directory: `files` (path → text) under it, sources and compiled alike. */
function tree(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-lanes-'));
  for (const [f, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
    fs.writeFileSync(path.join(root, f), text);
  }
  return root;
}

/** A test file `name` under test/, with its source and its compiled form. */
function testFile(name: string, source: string, compiled: string): Record<string, string> {
  return { [`test/${name}.ts`]: source, [`dist/test/${name}.js`]: compiled };
}

describe('test lanes: classifying a file by what it loads', () => {
  const helpers = {
    ...testFile('support/etcd-cluster', '', ''),
    ...testFile('support/fabric-cluster', '', 'require("./etcd-cluster");'),
    ...testFile('pools/support/nodes', '', 'require("../../support/etcd-cluster");'),
  };
  const lane = (files: Record<string, string>, name: string): string => {
    const root = tree({ ...helpers, ...files });
    try {
      return classify(`dist/test/${name}.js`, root).lane;
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  };

  it('puts a file that loads the etcd cluster through a helper in the etcd lane', () => {
    expect(lane(testFile('pools/a.test', '', 'require("./support/nodes");'), 'pools/a.test')).to.equal(
      'etcd',
    );
  });

  it('leaves a file that names the etcd cluster only as a type with the shared workers', () => {
    const src = "import type { EtcdCluster } from '../support/etcd-cluster';";
    expect(lane(testFile('pools/b.test', src, '"use strict";'), 'pools/b.test')).to.equal('shared');
  });

  it('puts a fabric cluster in the etcd lane only when the file asks it for etcd', () => {
    const uses = (source: string): string =>
      `const fabric_cluster_1 = require("../support/fabric-cluster"); start({ source: '${source}' });`;
    expect(lane(testFile('it/c.test', '', uses('etcd')), 'it/c.test')).to.equal('etcd');
    expect(lane(testFile('it/c.test', '', uses('static')), 'it/c.test')).to.equal('shared');
  });

  it("runs a file that measures its process's heap in the measure lane", () => {
    const src = 'const before = process.memoryUsage().heapUsed;';
    expect(lane(testFile('it/d.test', src, src), 'it/d.test')).to.equal('measure');
  });

  it('refuses to plan when a module a rule names has moved, rather than sharing its files', () => {
    const root = tree(testFile('it/e.test', '', ''));
    try {
      expect(() => planLanes(['dist/test/it/e.test.js'], root, 2)).to.throw(/test\/support\/etcd-cluster/);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('test lanes: balancing', () => {
  it("keeps a lane's own files first and gives the longest shared files to the least busy process", () => {
    const seconds = new Map([
      ['etcd', 10],
      ['a', 6],
      ['b', 5],
      ['c', 4],
      ['d', 1],
    ]);
    expect(fill([['etcd'], []], ['d', 'c', 'a', 'b'], seconds)).to.deep.equal([
      ['etcd', 'c'],
      ['a', 'b', 'd'],
    ]);
    expect(fill([['etcd'], [], []], ['d', 'c', 'a', 'b'], seconds)).to.deep.equal([
      ['etcd'],
      ['a', 'd'],
      ['b', 'c'],
    ]);
  });
});

describe('test lanes: running and summing', function () {
  this.timeout(60_000);
  // The fixtures' own lines ("1) fails") would read as this suite's failures in a log: kept out of it.
  const quiet = new PassThrough().resume();
  const run = (lane: string, fixture: string) =>
    startMocha(lane, [path.join(FIXTURES, `${fixture}.fixture.js`)], ROOT, '', {
      stdout: quiet,
      stderr: quiet,
    }).done;

  // Lane one passes; what lane two's fixture does decides the run and the lines that say why.
  for (const [title, second, ok, lines] of [
    [
      'sums the lanes and passes when every lane passed',
      'passing',
      true,
      ['4 passing, 0 failing, 2 pending (1 s)'],
    ],
    [
      'fails the run when one lane has a failing test, and names the test',
      'failing',
      false,
      ['3 passing, 1 failing, 1 pending (1 s)', '  failed in two: a failing fixture fails'],
    ],
    [
      "fails the run when a lane's process ends before its run does",
      'crashing',
      false,
      ['lane two: its mocha process ended (exit code 7) before the end of its run'],
    ],
  ] as const) {
    it(title, async () => {
      const runs = await Promise.all([run('one', 'passing'), run('two', second)]);
      const s = summarize(runs, 1000);
      expect(s.ok).to.equal(ok);
      for (const line of lines) expect(s.lines).to.include(line);
    });
  }

  it("ends the processes a lane's tests left running once the lane is done", async () => {
    const pidFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'wn-lanes-')), 'pid');
    process.env.WORKLOADNET_LANES_FIXTURE_PID = pidFile;
    try {
      const ran = await run('one', 'leaking');
      expect(ran.result?.passes).to.equal(1);
    } finally {
      delete process.env.WORKLOADNET_LANES_FIXTURE_PID;
    }
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    const alive = (): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    await waitUntil(() => !alive(), 'the leaked process ended', 10_000);
    fs.rmSync(path.dirname(pidFile), { recursive: true, force: true });
  });
});
