import { execFile } from 'node:child_process';
import * as fsSync from 'node:fs';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

// The benchmark's small native helpers (cni-exec.c, netlink-floor.c) are compiled at bench time with
// the system's cc, once per process, into a temporary directory that goes when the process exits:
// nothing native is committed or built by `npm run build`.

const execFileP = promisify(execFile);
const SOURCE_DIR = path.resolve(__dirname, '..', '..', '..', 'test', 'bench');
const built = new Map<string, Promise<string>>();
const dirs: string[] = [];

function removeDirs(): void {
  for (const dir of dirs.splice(0)) fsSync.rmSync(dir, { recursive: true, force: true });
}

/** Compiles test/bench/<name>.c (with `flags` after the defaults) and returns the binary's path. */
export function nativeTool(name: string, flags: readonly string[] = []): Promise<string> {
  let bin = built.get(name);
  if (!bin) {
    bin = (async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), `wn-${name}-`));
      if (dirs.push(dir) === 1) process.once('exit', removeDirs);
      const out = path.join(dir, name);
      await execFileP('cc', ['-O2', '-Wall', '-o', out, path.join(SOURCE_DIR, `${name}.c`), ...flags]);
      return out;
    })();
    built.set(name, bin);
  }
  return bin;
}
