// Sizes of the reliability tests. The defaults keep the whole folder within a few minutes on a 2-core
// CI machine; a bigger run (`npm run test:torture`) raises them through the environment:
//
//   WORKLOADNET_TORTURE_KILLS   SIGKILLs per torture test (default 30)
//   WORKLOADNET_TORTURE_SCALE   multiplier for workload counts, fuzz runs and load sizes (default 1)
//   WORKLOADNET_TORTURE_SEED    seed of the torture tests' random choices, to replay a failing run

function envNumber(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`${name}=${raw} must be a number >= ${min}`);
  return n;
}

export const TORTURE_KILLS = Math.round(envNumber('WORKLOADNET_TORTURE_KILLS', 30, 1));
export const TORTURE_SCALE = envNumber('WORKLOADNET_TORTURE_SCALE', 1, 0.01);
export const TORTURE_SEED = Math.round(
  envNumber('WORKLOADNET_TORTURE_SEED', Math.floor(Math.random() * 2 ** 31), 0),
);

/** `n` times the scale, at least 1. */
export function scaled(n: number): number {
  return Math.max(1, Math.round(n * TORTURE_SCALE));
}
