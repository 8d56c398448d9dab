// Loaded into a benchmark's daemon with NODE_OPTIONS=--require (see attach-steps.bench.ts), never by
// the product: it wraps the daemon's own functions to timestamp the steps of each Attach, so that
// where the time goes can be measured without changing the code that is measured. Attaches must be
// sent one at a time for the marks to be attributed (a single "current attach").
//
// On exit it writes, to $WN_ATTACH_STEPS_OUT, one array of marks per Attach: µs since the
// orchestrator's attach() was entered, by name. A function the daemon no longer has is reported on
// stderr and left alone (the code under measurement is being refactored).

import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { isMainThread } from 'node:worker_threads';

type Marks = Record<string, number>;

const out = process.env.WN_ATTACH_STEPS_OUT;
const dist = path.resolve(__dirname, '..', '..');
const records: Marks[] = [];
let current: { t0: bigint; marks: Marks } | undefined;

function mark(name: string): void {
  if (current) current.marks[name] = Number(process.hrtime.bigint() - current.t0) / 1000;
}

type AnyFn = (...args: unknown[]) => unknown;

/** Wraps obj[key] so that `${label}:start` and `${label}:end` are marked around it (async or not). */
function wrap(obj: Record<string, unknown> | undefined, key: string, label: string): void {
  const original = obj?.[key];
  if (!obj || typeof original !== 'function') {
    process.stderr.write(`attach-steps-hook: ${label} (${key}) not found; not timed\n`);
    return;
  }
  obj[key] = function (this: unknown, ...args: unknown[]): unknown {
    mark(`${label}:start`);
    const result = (original as AnyFn).apply(this, args);
    if (result instanceof Promise) return result.finally(() => mark(`${label}:end`));
    mark(`${label}:end`);
    return result;
  };
}

function load(rel: string): Record<string, unknown> | undefined {
  try {
    // The daemon's own module instances: the same resolved paths it loads.
    return createRequire(__filename)(path.join(dist, rel)) as Record<string, unknown>;
  } catch (err) {
    process.stderr.write(`attach-steps-hook: cannot load ${rel}: ${String(err)}\n`);
    return undefined;
  }
}

// NODE_OPTIONS reaches the daemon's worker threads too; only the main thread is timed here.
if (out && isMainThread) {
  const orchestrator = load('core/attach/orchestrator.js');
  const Orchestrator = orchestrator?.Orchestrator as { prototype: Record<string, unknown> } | undefined;
  const attach = Orchestrator?.prototype.attach;
  if (Orchestrator && typeof attach === 'function') {
    Orchestrator.prototype.attach = function (this: unknown, ...args: unknown[]): unknown {
      const me = { t0: process.hrtime.bigint(), marks: {} as Marks };
      current = me;
      const done = (): void => {
        me.marks.end = Number(process.hrtime.bigint() - me.t0) / 1000;
        records.push(me.marks);
        if (current === me) current = undefined;
      };
      return ((attach as AnyFn).apply(this, args) as Promise<unknown>).finally(done);
    };
  } else process.stderr.write('attach-steps-hook: Orchestrator.attach not found\n');
  // The moment the per-workload lock runs the attach's critical section.
  const KeyedMutex = load('lib/keyed-mutex.js')?.KeyedMutex as
    { prototype: Record<string, unknown> } | undefined;
  const run = KeyedMutex?.prototype.run;
  if (KeyedMutex && typeof run === 'function') {
    KeyedMutex.prototype.run = function (this: unknown, key: unknown, fn: AnyFn): unknown {
      return (run as AnyFn).call(this, key, () => {
        mark('locked');
        return fn();
      });
    };
  } else process.stderr.write('attach-steps-hook: KeyedMutex.run not found; lock not timed\n');
  wrap(
    load('core/netns-opener.js')?.kernelNetnsOpener as Record<string, unknown>,
    'openWorkload',
    'openNetns',
  );
  wrap(
    (load('core/store/store.js')?.Store as { prototype: Record<string, unknown> })?.prototype,
    'put',
    'store',
  );
  const linux = load('backends/linux/linux-backend.js')?.LinuxBackend as
    { prototype: Record<string, unknown> } | undefined;
  wrap(linux?.prototype, 'plan', 'plan');
  wrap(linux?.prototype, 'attach', 'backend');
  wrap(linux?.prototype, 'configureBothSides', 'sides');
  // The threadpool path (netlinkThread off, or a name already taken).
  wrap(load('backends/linux/veth-pair.js'), 'createVethPair', 'veth');
  // The netlink thread reports the time of each part of its exchange (µs) with the result.
  const NetlinkThread = load('backends/linux/netlink-thread.js')?.NetlinkThread as
    { prototype: Record<string, unknown> } | undefined;
  const threadAttach = NetlinkThread?.prototype.attach;
  if (NetlinkThread && typeof threadAttach === 'function') {
    NetlinkThread.prototype.attach = function (this: unknown, ...args: unknown[]): unknown {
      mark('thread:start');
      const me = current;
      type Result = { times?: Marks; startedAtUs?: number };
      return ((threadAttach as AnyFn).apply(this, args) as Promise<Result>).then((r) => {
        mark('thread:end');
        if (!me) return r;
        for (const [k, v] of Object.entries(r.times ?? {})) me.marks[`in-thread:${k}`] = v;
        // The thread's clock is this thread's (process.hrtime is one monotonic clock per process).
        if (r.startedAtUs !== undefined) me.marks['thread:began'] = r.startedAtUs - Number(me.t0 / 1000n);
        return r;
      });
    };
  } else process.stderr.write('attach-steps-hook: NetlinkThread.attach not found; not timed\n');
  process.on('exit', () => fs.writeFileSync(out, JSON.stringify(records)));
}
