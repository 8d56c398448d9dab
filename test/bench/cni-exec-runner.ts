import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnInNetns } from '../e2e/support/spawn-in-netns';
import { nativeTool } from './native-tool';
import { childOutput } from '../support/child-output';

// Drives cni-exec (cni-exec.c beside this file's source): the plugin calls of one benchmark phase are
// written to files, and the native runner executes and times them inside the node namespace, so a call
// costs what it costs a runtime, not what Node's child_process adds on top.

export interface PluginCall {
  env: Record<string, string>;
  stdin: string;
}

export interface PluginCallResult {
  ms: number;
  /** User + system CPU of the plugin process and the children it waited for (e.g. host-local). */
  cpuMs: number;
  /** The system part of cpuMs. */
  sysMs: number;
  stdout: string;
}

export interface PhaseResult {
  /** In call order. */
  calls: PluginCallResult[];
  /** Wall time of the whole phase. */
  totalMs: number;
  /** CPU of all the phase's plugin processes (and their children), summed, and its system part. */
  cpuMs: number;
  sysMs: number;
}

/**
 * Executes `plugin` once per call, `parallel` at a time, from inside the namespace at `netnsPath`.
 * Fails with the plugin's output if any call exits non-zero.
 */
export async function runPluginCalls(
  plugin: string,
  netnsPath: string,
  calls: readonly PluginCall[],
  parallel: number,
): Promise<PhaseResult> {
  const bin = await nativeTool('cni-exec');
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wn-cni-calls-'));
  try {
    await Promise.all(
      calls.map(async (c, i) => {
        const env = Object.entries(c.env).map(([k, v]) => `${k}=${v}\0`);
        await fs.writeFile(path.join(dir, `${i}.env`), env.join(''));
        await fs.writeFile(path.join(dir, `${i}.in`), c.stdin);
      }),
    );
    const run = await childOutput(
      spawnInNetns(netnsPath, bin, [plugin, String(parallel), dir, String(calls.length)], {
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    if (run.code !== 0) throw new Error(`cni-exec exited ${run.code}: ${run.stderr}`);
    const out = run.stdout;
    const ms: number[] = [];
    const cpu: number[] = [];
    const sys: number[] = [];
    let totalMs = Number.NaN;
    const failed: string[] = [];
    for (const line of out.trim().split('\n')) {
      const [a, b, c, d, e] = line.split(' ');
      if (a === 'total') totalMs = Number(b) / 1000;
      else {
        ms[Number(a)] = Number(c) / 1000;
        cpu[Number(a)] = Number(d) / 1000;
        sys[Number(a)] = Number(e) / 1000;
        if (b !== '0') failed.push(a ?? '?');
      }
    }
    if (failed.length > 0) {
      const i = failed[0];
      const stdout = await fs.readFile(path.join(dir, `${i}.out`), 'utf8').catch(() => '');
      const stderr = await fs.readFile(path.join(dir, `${i}.err`), 'utf8').catch(() => '');
      throw new Error(
        `${path.basename(plugin)}: ${failed.length} of ${calls.length} calls failed; call ${i}: ${(stdout || stderr).trim()}`,
      );
    }
    const results = await Promise.all(
      calls.map(async (_, i) => ({
        ms: ms[i] ?? Number.NaN,
        cpuMs: cpu[i] ?? Number.NaN,
        sysMs: sys[i] ?? Number.NaN,
        stdout: await fs.readFile(path.join(dir, `${i}.out`), 'utf8'),
      })),
    );
    const sum = (f: (c: PluginCallResult) => number): number => results.reduce((t, c) => t + f(c), 0);
    return { calls: results, totalMs, cpuMs: sum((c) => c.cpuMs), sysMs: sum((c) => c.sysMs) };
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}
