import { expect } from 'chai';
import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { promisify } from 'node:util';

// The daemon's heap settings (cli/heap-growth.ts) must hold for its whole life: a worker thread
// starting (the Linux backend's netlink thread) sets V8's flags back to the command line's. Measured
// in a fresh process, whose young generation has not grown yet.

const HEAP_GROWTH = path.resolve(__dirname, '..', '..', 'cli', 'heap-growth.js');

/** In a fresh process: load the settings, start a worker, allocate; the young generation's MiB. */
const PROBE = `
require(${JSON.stringify(HEAP_GROWTH)});
const { Worker } = require('node:worker_threads');
const v8 = require('node:v8');
const worker = new Worker('setInterval(() => undefined, 1000)', { eval: true });
worker.once('online', () => setImmediate(() => {
  let keep = [];
  for (let i = 0; i < 2000000; i++) { keep.push({ a: i, b: 'x' + i }); if (keep.length > 20000) keep = []; }
  const s = v8.getHeapSpaceStatistics().find((x) => x.space_name === 'new_space');
  console.log(s.physical_space_size / 2 ** 20);
  process.exit(0);
}));
`;

describe('daemon heap settings', () => {
  it('keep the young generation small, also after a worker thread has started', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', PROBE]);
    // V8's default lets it grow to 32 MiB (two 16 MiB semi-spaces) under this allocation; the
    // setting keeps it at its initial 2.
    expect(Number(stdout.trim())).to.be.within(0.5, 4);
  });
});
