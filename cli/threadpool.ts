// Netlink I/O runs on the libuv threadpool so that a ~20 ms veth delete never blocks the event loop.
// With the default 4 threads, parallel detaches queue behind each other; 16 threads reach about four
// times the rate (docs/benchmarks.md). libuv reads this once, when the pool first starts, so it must be set before any I/O:
// this module is imported first by the entry point.
if (!process.env.UV_THREADPOOL_SIZE) process.env.UV_THREADPOOL_SIZE = '16';

export {};
