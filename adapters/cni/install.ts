import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { alreadyExists, failedPrecondition, invalidArgument } from '../../core/errors';
import { moveAside, runtimeConfigs, type MovedAside } from './conf-dir';

// Puts the forwarder where a runtime looks for plugins and writes the network config that names it.
// Both files are written atomically (temporary file in the same folder, then rename), so a runtime that
// reads the config dir or execs the plugin meanwhile sees the old file or the new one, never half of one.
// The pod network's conflist is named to sort before the usual 10-*: the runtime takes the first
// config of its directory, and the other plugins' configs are moved aside (conf-dir.ts) unless kept.

export interface InstallCniOptions {
  /** The runtime's CNI bin_dir (e.g. /opt/cni/bin). */
  binDir: string;
  /** The runtime's CNI conf_dir (e.g. /etc/cni/net.d). */
  confDir: string;
  /** The daemon's CNI socket, written into the config for the forwarder. */
  cniSocket: string;
  /**
   * Network name; also names the file 05-<name>.conflist. On a daemon with named networks it selects
   * the network.
   */
  name: string;
  /**
   * A secondary network's conflist (not the runtime's default): written as 90-<name>.conflist, so a
   * runtime that takes the first conflist of its directory as the pod network keeps the default one.
   */
  secondary?: boolean;
  /** Replace files that workloadnet did not write. */
  force: boolean;
  /** The built forwarder (npm run build puts it at dist/bin/workloadnet-cni). */
  shimPath: string;
  mtu?: number;
  /**
   * Reference plugins to run after ours, in this order (portmap for hostPort, bandwidth for shaping).
   * Each must be in binDir (or pluginsFrom), unless force is set.
   */
  chain?: ChainedPlugin[];
  /**
   * Where to copy a chained plugin from when binDir has none (the image's /usr/lib/cni). A plugin
   * binDir already has is the node's and is left as it is, whatever its version.
   */
  pluginsFrom?: string;
  /**
   * Leave other plugins' configs where they are (the pod network only; a secondary network never moves
   * anything). By default they are renamed *.workloadnet-disabled, so the runtime cannot take one.
   */
  keepOthers?: boolean;
}

/** The plugins install-cni knows how to chain, and the runtime capabilities each one receives. */
export const CHAINABLE_PLUGINS = {
  // snat: traffic to a hostPort from the node itself or a hairpin gets masqueraded, so replies come
  // back through the node; this is what kubelet's hostport handling did and what users expect.
  portmap: { type: 'portmap', capabilities: { portMappings: true }, snat: true },
  bandwidth: { type: 'bandwidth', capabilities: { bandwidth: true } },
} as const;

export type ChainedPlugin = keyof typeof CHAINABLE_PLUGINS;

export function parseChain(list: string): ChainedPlugin[] {
  const names = list
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  const known = Object.keys(CHAINABLE_PLUGINS);
  const chain: ChainedPlugin[] = [];
  for (const n of names) {
    if (!known.includes(n)) {
      throw invalidArgument(`cannot chain "${n}": install-cni chains ${known.join(' and ')}`);
    }
    if (chain.includes(n as ChainedPlugin)) throw invalidArgument(`"${n}" is named twice in the chain`);
    chain.push(n as ChainedPlugin);
  }
  return chain;
}

export interface InstalledCni {
  binary: string;
  conflist: string;
  /** The CNI versions the conflist offers (see renderConflist). */
  cniVersions: string[];
  /** Why 1.1.0 is not offered (a chained plugin that does not speak it), when it is not. */
  versionNote?: string;
  /** Chained plugins copied into binDir from pluginsFrom. */
  copiedPlugins: string[];
  /** Other plugins' configs renamed aside. */
  movedAside: MovedAside[];
  /** Conflists of ours for the same network under another name (an older release's), removed. */
  superseded: string[];
  /** With keepOthers: the configs that sort before ours, one of which the runtime takes instead. */
  shadowedBy: string[];
}

/** The version every runtime and plugin here speaks; the one a libcni older than 1.2 uses. */
export const BASE_CNI_VERSION = '1.0.0';
/** The version with STATUS and GC, used by libcni 1.2 and later when every plugin of the list has it. */
export const STATUS_CNI_VERSION = '1.1.0';

/** The plugin "type" in configs, hence the executable's name in binDir. */
export const CNI_PLUGIN_TYPE = 'workloadnet';

/** The forwarder's User-Agent, present in every build of it (see shim/workloadnet-cni.c). */
export const SHIM_MARKER = Buffer.from('workloadnet-cni/');

/** A top-level conflist key that libcni ignores and that marks the file as written by this function. */
export const CONFLIST_MARKER_KEY = 'workloadnet.managedBy';
const CONFLIST_MARKER_VALUE = 'workloadnet install-cni';

const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const SUN_PATH_MAX = 107;

/**
 * The file name's prefix: before the usual 10-* (flannel, bridge, Calico's 10-calico) for the pod
 * network; after them for a secondary network, which must never become the runtime's default.
 */
export function conflistName(name: string, secondary = false): string {
  return `${secondary ? 90 : '05'}-${name}.conflist`;
}

export async function installCni(opts: InstallCniOptions): Promise<InstalledCni> {
  validate(opts);
  const binary = path.join(opts.binDir, CNI_PLUGIN_TYPE);
  const conflist = path.join(opts.confDir, conflistName(opts.name, opts.secondary));

  const shim = await fs.readFile(opts.shimPath).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') {
      throw failedPrecondition(
        `the CNI forwarder ${opts.shimPath} was not built: npm run build compiles it only when a C compiler ` +
          'is present. Install one (Debian: apt-get install gcc libc6-dev), then run npm run build',
      );
    }
    throw invalidArgument(`cannot read the CNI forwarder ${opts.shimPath} (${err.code ?? err.message})`);
  });
  if (!shim.includes(SHIM_MARKER)) {
    throw invalidArgument(`${opts.shimPath} is not a workloadnet-cni forwarder build`);
  }

  // Check everything before writing anything, so a refusal leaves nothing half-installed.
  const chain = opts.chain ?? [];
  const toCopy: ChainedPlugin[] = [];
  for (const name of chain) {
    if (await isExecutable(path.join(opts.binDir, name))) continue;
    if (opts.pluginsFrom && (await isExecutable(path.join(opts.pluginsFrom, name)))) toCopy.push(name);
    else if (!opts.force) await requirePlugin(opts.binDir, name, opts.pluginsFrom);
  }
  if (!opts.force) {
    await refuseForeign(binary, (b) => b.includes(SHIM_MARKER), 'a workloadnet-cni forwarder');
    await refuseForeign(conflist, isOurConflist, 'a conflist written by workloadnet');
  }

  await fs.mkdir(opts.binDir, { recursive: true, mode: 0o755 });
  await fs.mkdir(opts.confDir, { recursive: true, mode: 0o755 });
  for (const name of toCopy) {
    const from = path.join(opts.pluginsFrom ?? '', name);
    await writeAtomic(path.join(opts.binDir, name), await fs.readFile(from), 0o755);
  }
  await writeAtomic(binary, shim, 0o755);
  const versions = await offeredVersions(opts.binDir, chain);
  await writeAtomic(
    conflist,
    Buffer.from(renderConflist({ ...opts, cniVersions: versions.versions })),
    0o644,
  );
  // Ours is in place before anything else moves, so the runtime never sees a directory without one.
  const others = await arrangeConfDir(opts, conflist);
  return {
    binary,
    conflist,
    cniVersions: versions.versions,
    versionNote: versions.note,
    copiedPlugins: toCopy.map((n) => path.join(opts.binDir, n)),
    ...others,
  };
}

/**
 * The other configs of the directory: ours for the same network under another name are superseded and
 * removed; other plugins' are moved aside for the pod network unless kept; with keepOthers, those that
 * sort before ours are named (the runtime takes the first).
 */
async function arrangeConfDir(
  opts: InstallCniOptions,
  conflist: string,
): Promise<Pick<InstalledCni, 'movedAside' | 'superseded' | 'shadowedBy'>> {
  const out = { movedAside: [] as MovedAside[], superseded: [] as string[], shadowedBy: [] as string[] };
  for (const n of await runtimeConfigs(opts.confDir)) {
    const file = path.join(opts.confDir, n);
    if (file === conflist) continue;
    const content = await fs.readFile(file).catch(() => undefined);
    if (content === undefined) continue; // gone meanwhile, or not a file
    const ours = ourConflistName(content);
    if (ours !== undefined) {
      if (ours === opts.name) {
        await fs.rm(file, { force: true });
        out.superseded.push(file);
      }
      continue;
    }
    if (opts.secondary) continue;
    if (!opts.keepOthers) out.movedAside.push(await moveAside(file));
    else if (n < path.basename(conflist)) out.shadowedBy.push(file);
  }
  return out;
}

/**
 * The conflist. cniVersion is 1.0.0, which every runtime here reads; cniVersions adds 1.1.0 when every
 * plugin of the list speaks it: libcni 1.2 and later (containerd 2, CRI-O 1.31) take the highest
 * version listed there and then send STATUS and GC, while an older libcni ignores the key. A plain
 * "cniVersion": "1.1.0" would break pod creation under an older libcni (containerd 1.6 and 1.7:
 * "unsupported CNI result version"), and any chained plugin older than 1.1.0 support refuses it.
 */
export function renderConflist(
  opts: Pick<InstallCniOptions, 'name' | 'cniSocket' | 'mtu' | 'chain'> & { cniVersions?: string[] },
): string {
  const plugin: Record<string, unknown> = { type: CNI_PLUGIN_TYPE, socket: opts.cniSocket };
  if (opts.mtu !== undefined) plugin.mtu = opts.mtu;
  // dns lets the runtime pass the pod's DNS settings for the result. portMappings and bandwidth are
  // declared on the chained plugins that apply them, never on ours: the daemon does not implement them,
  // and declaring them here would make hostPorts silently fail.
  plugin.capabilities = { dns: true };
  // Chained plugins read our result as prevResult: the host interface (no sandbox) for bandwidth, the
  // pod's addresses for portmap.
  const chained = (opts.chain ?? []).map((name) => ({ ...CHAINABLE_PLUGINS[name] }));
  const versions = opts.cniVersions ?? [BASE_CNI_VERSION, STATUS_CNI_VERSION];
  const list = {
    cniVersion: BASE_CNI_VERSION,
    ...(versions.length > 1 ? { cniVersions: versions } : {}),
    name: opts.name,
    plugins: [plugin, ...chained],
    [CONFLIST_MARKER_KEY]: CONFLIST_MARKER_VALUE,
  };
  return `${JSON.stringify(list, null, 2)}\n`;
}

function validate(opts: InstallCniOptions): void {
  if (!NETWORK_NAME.test(opts.name)) {
    throw invalidArgument(
      `network name "${opts.name}" must be letters, digits, "_", "." and "-", starting with a letter or digit`,
    );
  }
  if (!path.isAbsolute(opts.cniSocket))
    throw invalidArgument(`CNI socket "${opts.cniSocket}" must be an absolute path`);
  if (Buffer.byteLength(opts.cniSocket) > SUN_PATH_MAX) {
    throw invalidArgument(
      `CNI socket path "${opts.cniSocket}" is longer than ${SUN_PATH_MAX} bytes, the unix socket limit`,
    );
  }
  if (opts.mtu !== undefined && (!Number.isInteger(opts.mtu) || opts.mtu < 68 || opts.mtu > 65535)) {
    throw invalidArgument(`mtu ${opts.mtu} must be an integer from 68 to 65535`);
  }
}

async function isExecutable(file: string): Promise<boolean> {
  return fs.access(file, fsConstants.X_OK).then(
    () => true,
    () => false,
  );
}

async function requirePlugin(binDir: string, name: ChainedPlugin, pluginsFrom?: string): Promise<void> {
  const file = path.join(binDir, name);
  try {
    await fs.access(file, fsConstants.X_OK);
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'is not there' : 'is not executable';
    const from = pluginsFrom ? ` nor in ${pluginsFrom}` : '';
    throw failedPrecondition(
      `cannot chain ${name}: ${file} ${why}${from}. Install the reference CNI plugins there (Debian: ` +
        `apt-get install containernetworking-plugins puts them in /usr/lib/cni), or install with force ` +
        'to write the conflist anyway',
    );
  }
}

/**
 * The versions the conflist offers: 1.0.0, and 1.1.0 when every chained plugin says (CNI VERSION) that
 * it supports it. Our forwarder supports both.
 */
async function offeredVersions(
  binDir: string,
  chain: ChainedPlugin[],
): Promise<{ versions: string[]; note?: string }> {
  for (const name of chain) {
    const file = path.join(binDir, name);
    const supported = await pluginVersions(file);
    if (!supported.includes(STATUS_CNI_VERSION)) {
      const says = supported.length > 0 ? `supports ${supported.join(', ')}` : 'did not answer VERSION';
      return {
        versions: [BASE_CNI_VERSION],
        note:
          `${file} ${says}, not ${STATUS_CNI_VERSION}: the conflist offers ${BASE_CNI_VERSION} only, so ` +
          'runtimes send no STATUS or GC (reference plugins support 1.1.0 from release 1.5.0)',
      };
    }
  }
  return { versions: [BASE_CNI_VERSION, STATUS_CNI_VERSION] };
}

/** A plugin's answer to CNI VERSION (its supportedVersions), or [] when it gives none. */
function pluginVersions(file: string): Promise<string[]> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      [],
      { env: { CNI_COMMAND: 'VERSION' }, timeout: 5000, maxBuffer: 64 * 1024 },
      (err, stdout) => {
        if (err) return resolve([]);
        try {
          const v = (JSON.parse(stdout) as { supportedVersions?: unknown }).supportedVersions;
          resolve(Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
        } catch {
          resolve([]);
        }
      },
    );
    // A plugin may answer without reading its input: its closed stdin is no error of ours.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(JSON.stringify({ cniVersion: BASE_CNI_VERSION }));
  });
}

function isOurConflist(content: Buffer): boolean {
  return ourConflistName(content) !== undefined;
}

/** The network name of a conflist written by installCni; undefined for anyone else's file. */
export function ourConflistName(content: Buffer): string | undefined {
  try {
    const parsed = JSON.parse(content.toString('utf8')) as Record<string, unknown> | null;
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    if (parsed[CONFLIST_MARKER_KEY] !== CONFLIST_MARKER_VALUE) return undefined;
    return typeof parsed.name === 'string' ? parsed.name : '';
  } catch {
    return undefined;
  }
}

async function refuseForeign(
  file: string,
  isOurs: (content: Buffer) => boolean,
  what: string,
): Promise<void> {
  let content: Buffer;
  try {
    content = await fs.readFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (!isOurs(content)) {
    throw alreadyExists(
      `${file} exists and is not ${what}; move it away or install with force to replace it`,
    );
  }
}

async function writeAtomic(file: string, data: Buffer, mode: number): Promise<void> {
  const tmp = path.join(
    path.dirname(file),
    `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`,
  );
  try {
    const fh = await fs.open(tmp, 'wx', mode);
    try {
      await fh.writeFile(data);
      // mode given to open() is filtered by the umask; the result must not depend on it.
      await fh.chmod(mode);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
}
