// The daemon holds little (24 MiB of live heap at 10,000 attachments) but allocates a lot per call,
// and V8's defaults size the heap for throughput: a young generation of up to 32 MiB, and an old one
// left to grow well past what a full collection keeps, which would be most of the daemon's memory
// (docs/benchmarks.md, "Memory at 10,000 attachments"). Both are capped here, where they can be set
// after start: the young generation stays at its initial 1 MiB semi-spaces, and the old one may grow
// 20 % past what a full collection left before the next one. This module is imported first by the
// entry point, before the heap has grown.
import { setFlagsFromString } from 'node:v8';

function apply(): void {
  setFlagsFromString('--semi-space-growth-factor=1');
  setFlagsFromString('--heap-growing-percent=20');
}

apply();
// A worker thread starting (the Linux backend's netlink thread) sets V8's flags back to the command
// line's for the whole process, the young generation's cap among them: once the thread runs, they
// are set again.
process.on('worker', (worker) => worker.once('online', apply));

export {};
