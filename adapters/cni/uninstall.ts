import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { restoreMovedAside, runtimeConfigs, DISABLED_SUFFIX, type MovedAside } from './conf-dir';
import { CNI_PLUGIN_TYPE, SHIM_MARKER, ourConflistName } from './install';

// install-cni undone: the other plugins' configs it moved aside are renamed back first, then our
// conflists go. In that order the runtime always finds a config: ours still sorts first until it is
// removed, and the restored one is there when it is. Only files that carry our mark are removed: a
// conflist of another plugin named like ours, or a binary that is not the forwarder, stays.

export interface UninstallCniOptions {
  binDir: string;
  confDir: string;
  /** Says what would change, changes nothing. */
  dryRun?: boolean;
}

export interface UninstalledCni {
  /** Our conflists, removed. */
  removed: string[];
  /** Configs moved aside by install-cni, renamed back. */
  restored: MovedAside[];
  /** Configs moved aside that stay so: a file of the original name exists again. */
  kept: string[];
  /** The forwarder, when it was ours and is removed. */
  binary?: string;
}

export async function uninstallCni(opts: UninstallCniOptions): Promise<UninstalledCni> {
  const ours: string[] = [];
  for (const n of await runtimeConfigs(opts.confDir)) {
    const file = path.join(opts.confDir, n);
    const content = await fs.readFile(file).catch(() => undefined);
    if (content !== undefined && ourConflistName(content) !== undefined) ours.push(file);
  }
  const binaryFile = path.join(opts.binDir, CNI_PLUGIN_TYPE);
  const shim = await fs.readFile(binaryFile).catch(() => undefined);
  const binary = shim?.includes(SHIM_MARKER) ? binaryFile : undefined;
  if (opts.dryRun) {
    const aside = (await fs.readdir(opts.confDir).catch(() => [] as string[]))
      .filter((n) => n.endsWith(DISABLED_SUFFIX))
      .sort()
      .map((n) => path.join(opts.confDir, n));
    const restored: MovedAside[] = [];
    const kept: string[] = [];
    for (const from of aside) {
      const to = from.slice(0, -DISABLED_SUFFIX.length);
      if (await exists(to)) kept.push(from);
      else restored.push({ from, to });
    }
    return { removed: ours, restored, kept, ...(binary ? { binary } : {}) };
  }
  const back = await restoreMovedAside(opts.confDir);
  for (const f of ours) await fs.rm(f, { force: true });
  if (binary) await fs.rm(binary, { force: true });
  return { removed: ours, restored: back.restored, kept: back.kept, ...(binary ? { binary } : {}) };
}

function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}
