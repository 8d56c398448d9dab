import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { alreadyExists, invalidArgument } from '../../core/errors';

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
  /** Network name; also names the file 10-<name>.conflist. */
  name: string;
  /** Replace files that workloadnet did not write. */
  force: boolean;
  /** The built forwarder (npm run build puts it at dist/bin/workloadnet-cni). */
  shimPath: string;
  mtu?: number;
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
  const conflist = path.join(opts.confDir, `10-${opts.name}.conflist`);

  const shim = await fs.readFile(opts.shimPath).catch((err: NodeJS.ErrnoException) => {
    throw invalidArgument(
      `cannot read the CNI forwarder ${opts.shimPath} (${err.code ?? err.message}); run npm run build first`,
    );
  });
  if (!shim.includes(SHIM_MARKER)) {
    throw invalidArgument(`${opts.shimPath} is not a workloadnet-cni forwarder build`);
  }

  // Check both targets before writing either, so a refusal leaves nothing half-installed.
  if (!opts.force) {
    await refuseForeign(binary, (b) => b.includes(SHIM_MARKER), 'a workloadnet-cni forwarder');
    await refuseForeign(conflist, isOurConflist, 'a conflist written by workloadnet');
  }

  await fs.mkdir(opts.binDir, { recursive: true, mode: 0o755 });
  await fs.mkdir(opts.confDir, { recursive: true, mode: 0o755 });
  await writeAtomic(binary, shim, 0o755);
  await writeAtomic(conflist, Buffer.from(renderConflist(opts)), 0o644);
  return { binary, conflist };
}

export function renderConflist(opts: Pick<InstallCniOptions, 'name' | 'cniSocket' | 'mtu'>): string {
  const plugin: Record<string, unknown> = { type: CNI_PLUGIN_TYPE, socket: opts.cniSocket };
  if (opts.mtu !== undefined) plugin.mtu = opts.mtu;
  // dns lets the runtime pass the pod's DNS settings for the result. portMappings and bandwidth are not
  // declared: the daemon does not implement them, and declaring them would make hostPorts silently fail;
  // chain the portmap/bandwidth plugins after this one to get them.
  plugin.capabilities = { dns: true };
  const list = {
    cniVersion: '1.0.0',
    name: opts.name,
    plugins: [plugin],
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
