import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { alreadyExists, failedPrecondition, invalidArgument } from '../../core/errors';

// Puts the forwarder where a runtime looks for plugins and writes the network config that names it.
// Both files are written atomically (temporary file in the same folder, then rename), so a runtime that
// reads the config dir or execs the plugin meanwhile sees the old file or the new one, never half of one.

export interface InstallCniOptions {
  /** The runtime's CNI bin_dir (e.g. /opt/cni/bin). */
  binDir: string;
  /** The runtime's CNI conf_dir (e.g. /etc/cni/net.d). */
  confDir: string;
  /** The daemon's CNI socket, written into the config for the forwarder. */
  cniSocket: string;
  /**
   * Network name; also names the file 10-<name>.conflist. On a daemon with named networks it selects
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
   * Each must be in binDir, unless force is set.
   */
  chain?: ChainedPlugin[];
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
}

/** The plugin "type" in configs, hence the executable's name in binDir. */
export const CNI_PLUGIN_TYPE = 'workloadnet';

/** The forwarder's User-Agent, present in every build of it (see shim/workloadnet-cni.c). */
const SHIM_MARKER = Buffer.from('workloadnet-cni/');

/** A top-level conflist key that libcni ignores and that marks the file as written by this function. */
export const CONFLIST_MARKER_KEY = 'workloadnet.managedBy';
const CONFLIST_MARKER_VALUE = 'workloadnet install-cni';

const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const SUN_PATH_MAX = 107;

export async function installCni(opts: InstallCniOptions): Promise<InstalledCni> {
  validate(opts);
  const binary = path.join(opts.binDir, CNI_PLUGIN_TYPE);
  const conflist = path.join(opts.confDir, `${opts.secondary ? 90 : 10}-${opts.name}.conflist`);

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
  if (!opts.force) {
    for (const name of opts.chain ?? []) await requirePlugin(opts.binDir, name);
    await refuseForeign(binary, (b) => b.includes(SHIM_MARKER), 'a workloadnet-cni forwarder');
    await refuseForeign(conflist, isOurConflist, 'a conflist written by workloadnet');
  }

  await fs.mkdir(opts.binDir, { recursive: true, mode: 0o755 });
  await fs.mkdir(opts.confDir, { recursive: true, mode: 0o755 });
  await writeAtomic(binary, shim, 0o755);
  await writeAtomic(conflist, Buffer.from(renderConflist(opts)), 0o644);
  return { binary, conflist };
}

export function renderConflist(
  opts: Pick<InstallCniOptions, 'name' | 'cniSocket' | 'mtu' | 'chain'>,
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
  const list = {
    cniVersion: '1.0.0',
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

async function requirePlugin(binDir: string, name: ChainedPlugin): Promise<void> {
  const file = path.join(binDir, name);
  try {
    await fs.access(file, fsConstants.X_OK);
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'is not there' : 'is not executable';
    throw failedPrecondition(
      `cannot chain ${name}: ${file} ${why}. Install the reference CNI plugins there (Debian: apt-get ` +
        `install containernetworking-plugins puts them in /usr/lib/cni), or install with force to write ` +
        'the conflist anyway',
    );
  }
}

function isOurConflist(content: Buffer): boolean {
  try {
    const parsed: unknown = JSON.parse(content.toString('utf8'));
    return (
      typeof parsed === 'object' &&
      parsed !== null &&
      (parsed as Record<string, unknown>)[CONFLIST_MARKER_KEY] === CONFLIST_MARKER_VALUE
    );
  } catch {
    return false;
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
