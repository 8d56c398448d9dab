import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

// The benchmark's small native helpers (cni-exec.c, netlink-floor.c) are compiled at bench time with
// the system's cc, once per process, into a temporary directory: nothing native is committed or built
// by `npm run build`.

const execFileP = promisify(execFile);
const SOURCE_DIR = path.resolve(__dirname, '..', '..', '..', 'test', 'bench');
const built = new Map<string, Promise<string>>();

/** Compiles test/bench/<name>.c (with `flags` after the defaults) and returns the binary's path. */
export function nativeTool(name: string, flags: readonly string[] = []): Promise<string> {
  let bin = built.get(name);
  if (!bin) {
    bin = (async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), `wn-${name}-`));
      const out = path.join(dir, name);
      await execFileP('cc', ['-O2', '-Wall', '-o', out, path.join(SOURCE_DIR, `${name}.c`), ...flags]);
      return out;
    })();
    built.set(name, bin);
  }
  return bin;
}
