import { promises as fs } from 'node:fs';
import * as path from 'node:path';

// The runtime's CNI config directory as libcni reads it: every *.conf, *.conflist and *.json file,
// sorted by name; containerd and CRI-O take the first as the pod network. install-cni puts ours first
// and moves the other plugins' configs aside by renaming them (the content stays, byte for byte), so
// that the runtime cannot pick one of them and nobody wonders which network a pod got. Restoring is
// the rename back.

/** What a config moved aside is renamed to: its name with this suffix, which no runtime reads. */
export const DISABLED_SUFFIX = '.workloadnet-disabled';

const CONFIG_EXTENSIONS = ['.conf', '.conflist', '.json'];

/** The files of `confDir` a runtime reads as network configs, sorted as libcni sorts them. */
export async function runtimeConfigs(confDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await fs.readdir(confDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  // libcni sorts with Go's sort.Strings: by bytes, which is code unit order for these names.
  return names.filter((n) => CONFIG_EXTENSIONS.includes(path.extname(n))).sort(byBytes);
}

export interface MovedAside {
  from: string;
  to: string;
}

/** Renames `file` to `file` + DISABLED_SUFFIX (replacing an older copy moved aside under that name). */
export async function moveAside(file: string): Promise<MovedAside> {
  const to = file + DISABLED_SUFFIX;
  await fs.rename(file, to);
  return { from: file, to };
}

export interface Restored {
  restored: MovedAside[];
  /** Moved-aside files left as they are because a file of the original name exists again. */
  kept: string[];
}

/** Renames every config moved aside in `confDir` back, unless its original name was taken since. */
export async function restoreMovedAside(confDir: string): Promise<Restored> {
  const out: Restored = { restored: [], kept: [] };
  let names: string[];
  try {
    names = await fs.readdir(confDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return out;
    throw err;
  }
  for (const n of names.filter((x) => x.endsWith(DISABLED_SUFFIX)).sort(byBytes)) {
    const from = path.join(confDir, n);
    const to = from.slice(0, -DISABLED_SUFFIX.length);
    // link then unlink: a rename would replace a file that appeared under the original name meanwhile.
    try {
      await fs.link(from, to);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      out.kept.push(from);
      continue;
    }
    await fs.unlink(from);
    out.restored.push({ from, to });
  }
  return out;
}

function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}
