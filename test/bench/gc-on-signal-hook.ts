// Loaded into a benchmark's daemon with NODE_OPTIONS="--expose-gc --require <this>" (see
// soak.bench.ts), never by the product. On SIGUSR2 it runs a full garbage collection, so that the heap
// figure read right after is the live heap, not wherever the collector happened to be; a heap snapshot
// would do the same but leaves tens of MiB of native memory resident, which then reads as RSS. When
// $WN_GC_HOOK_DIR holds a file named `snapshot`, the signal also writes a heap snapshot there (and
// removes the request), for the bench's last sample.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import { isMainThread } from 'node:worker_threads';

const dir = process.env.WN_GC_HOOK_DIR;
const gc = (globalThis as { gc?: () => void }).gc;

if (isMainThread && gc) {
  process.on('SIGUSR2', () => {
    gc();
    if (!dir) return;
    const request = path.join(dir, 'snapshot');
    if (!fs.existsSync(request)) return;
    fs.rmSync(request);
    writeHeapSnapshot(path.join(dir, `daemon-${process.pid}-${Date.now()}.heapsnapshot`));
  });
}
