// IP allocator micro-benchmark: allocation rate in steady-state churn (pool ~90% full, release one random
// held address then allocate one) at 1k and 60k pool sizes, and the memory a 60k pool costs.
// Run alone with: node dist/test/bench/allocator.bench.js

import v8 from 'node:v8';
import vm from 'node:vm';
import { IpAllocator } from '../../core/ipam/ip-allocator';
import { IpPool } from '../../core/ipam/ip-pool';

export interface BenchRow {
  name: string;
  value: number;
  unit: string;
}

/** Small deterministic PRNG so every run churns the same way. */
function xorshift(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

interface Churnable {
  size: number;
  allocate(): string[];
  release(addresses: string[]): void;
}

/** Fills to ~90%, then measures release+allocate pairs; returns allocations per second. */
function churnRate(target: Churnable, ops: number): number {
  const rand = xorshift(0x5eed);
  const held: string[][] = [];
  const fill = Math.floor(target.size * 0.9);
  for (let i = 0; i < fill; i++) held.push(target.allocate());
  const step = (): void => {
    const idx = Math.floor(rand() * held.length);
    const victim = held[idx]!;
    held[idx] = held[held.length - 1]!;
    held.pop();
    target.release(victim);
    held.push(target.allocate());
  };
  for (let i = 0; i < 5000; i++) step(); // let the JIT settle before timing
  const start = process.hrtime.bigint();
  for (let i = 0; i < ops; i++) step();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return ops / seconds;
}

const poolTarget = (pool: IpPool): Churnable => ({
  size: pool.size,
  allocate: () => [pool.allocate()],
  release: ([a]) => pool.release(a!),
});

const allocatorTarget = (allocator: IpAllocator): Churnable => ({
  size: Math.min(...allocator.usage().map((u) => u.size)),
  allocate: () => allocator.allocate().map((ip) => ip.address),
  release: (addresses) => allocator.release(addresses),
});

/** A gc() that works without --expose-gc (the flag can be turned on at run time for a fresh context). */
function collector(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}

/** Bytes (JS heap + typed-array buffers) retained per 60k pool filled to 90%, averaged over several. */
function poolMemory(): number {
  const gc = collector();
  const measure = (): number => {
    gc();
    gc();
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  const count = 32;
  const before = measure();
  const pools: IpPool[] = [];
  for (let n = 0; n < count; n++) {
    const pool = new IpPool('10.2.0.0/16');
    const fill = Math.floor(pool.size * 0.9);
    for (let i = 0; i < fill; i++) pool.allocate();
    pools.push(pool);
  }
  const after = measure();
  if (pools.some((p) => p.used !== Math.floor(p.size * 0.9))) throw new Error('pool lost allocations');
  return Math.round((after - before) / count);
}

export function benchAllocator(): BenchRow[] {
  const round = (n: number): number => Math.round(n);
  // Memory first: freed buffers of earlier runs would otherwise be credited against the new pools.
  const memory = poolMemory();
  const pool1k = new IpPool('10.1.0.0/22');
  const pool60k = new IpPool('10.2.0.0/16');
  const dual = new IpAllocator([{ cidr: '10.3.0.0/16' }, { cidr: 'fd00:3::/64' }]);
  return [
    {
      name: `allocator: pool 1k (${pool1k.size} usable, 90% full) allocations/s`,
      value: round(churnRate(poolTarget(pool1k), 200_000)),
      unit: 'ops/s',
    },
    {
      name: `allocator: pool 60k (${pool60k.size} usable, 90% full) allocations/s`,
      value: round(churnRate(poolTarget(pool60k), 200_000)),
      unit: 'ops/s',
    },
    {
      name: 'allocator: dual-stack /16 + /64 (90% of the /16 full) allocations/s',
      value: round(churnRate(allocatorTarget(dual), 100_000)),
      unit: 'ops/s',
    },
    { name: 'allocator: memory of a 60k pool filled to 90%', value: memory, unit: 'bytes' },
  ];
}

if (require.main === module) {
  for (const row of benchAllocator()) console.log(`${row.name}: ${row.value} ${row.unit}`);
}
