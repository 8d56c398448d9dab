// Loaded into a benchmark's daemon with NODE_OPTIONS="--expose-gc --require <this>" (see
// soak.bench.ts), never by the product. On SIGUSR2 it runs a full garbage collection, so that the heap
// figure read right after is the live heap, not wherever the collector happened to be; a heap snapshot
// would do the same but leaves tens of MiB of native memory resident, which then reads as RSS. When
// $WN_GC_HOOK_DIR holds a file named `snapshot`, the signal also writes a heap snapshot there (and
// removes the request), for the bench's last sample.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { getHeapSpaceStatistics, setFlagsFromString, writeHeapSnapshot } from 'node:v8';
import { isMainThread } from 'node:worker_threads';

const dir = process.env.WN_GC_HOOK_DIR;
// V8 flags to try on the daemon that NODE_OPTIONS does not take (experiments only).
for (const f of (process.env.WN_V8_FLAGS ?? '').split(' ').filter(Boolean)) setFlagsFromString(f);
const gc = (globalThis as { gc?: () => void }).gc;

if (isMainThread && gc) {
  process.on('SIGUSR2', () => {
    const before = memory();
    gc();
    if (!dir) return;
    // Where the memory is, before and after the collection: V8's spaces (committed and used) and what
    // lives outside them (Buffers, native).
    fs.writeFileSync(
      path.join(dir, `memory-${process.pid}-${Date.now()}.json`),
      JSON.stringify({ before, after: memory() }, null, 1),
    );
    const request = path.join(dir, 'snapshot');
    if (!fs.existsSync(request)) return;
    fs.rmSync(request);
    writeHeapSnapshot(path.join(dir, `daemon-${process.pid}-${Date.now()}.heapsnapshot`));
  });
}

function memory(): Record<string, number> {
  const mib = (n: number): number => Math.round((n / 2 ** 20) * 10) / 10;
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(process.memoryUsage())) out[k] = mib(v);
  for (const s of getHeapSpaceStatistics()) {
    out[`${s.space_name}.committed`] = mib(s.physical_space_size);
    out[`${s.space_name}.used`] = mib(s.space_used_size);
  }
  return out;
}
