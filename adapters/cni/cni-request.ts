import { type CniArgs, parseCniArgs } from './cni-args';
import { type NetworkConfig, configVersion, decodeStdin, parseNetworkConfig } from './cni-config';
import { CniError, CniErrorCode } from './cni-error';
import { cniVersionAtLeast } from './cni-version';

// One CNI call as received (environment + stdin), validated into a typed request. Checks run in the
// order a Go plugin built on libcni's skeleton runs them, so a runtime gets the same code for the same
// mistake: required variables (4), stdin decoding (6), cniVersion (1), verb allowed at that version (1),
// then values (4 for the environment, 7 for the config).

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC' | 'VERSION';

const COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION'];

export interface AttachmentRequest {
  command: 'ADD' | 'CHECK';
  containerId: string;
  netns: string;
  ifName: string;
  args: CniArgs;
  config: NetworkConfig;
}

export interface DelRequest {
  command: 'DEL';
  containerId: string;
  /** Undefined when the runtime sent none (it may no longer know it). */
  netns?: string;
  ifName: string;
  config: NetworkConfig;
}

export interface StatusRequest {
  command: 'STATUS';
  config: NetworkConfig;
}

export interface GcRequest {
  command: 'GC';
  config: NetworkConfig;
  validAttachments: { containerId: string; ifName: string }[];
}

export interface VersionRequest {
  command: 'VERSION';
}

export type CniRequest = AttachmentRequest | DelRequest | StatusRequest | GcRequest | VersionRequest;

export type CniEnv = Readonly<Record<string, string | undefined>>;

// CNI_PATH is required where the spec requires it even though the daemon runs no delegate plugins: a
// runtime that omits it is misconfigured, and saying so early beats a confusing failure later.
const REQUIRED: Record<Exclude<CniCommand, 'VERSION'>, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_PATH'],
  STATUS: [],
  GC: [],
};

// Verbs that do not exist in older spec versions; libcni's skeleton refuses them with code 1.
const MINIMUM_VERSION: Partial<Record<CniCommand, string>> = { CHECK: '0.4.0', STATUS: '1.1.0', GC: '1.1.0' };

const CONTAINER_ID = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

function badEnv(msg: string, details = ''): CniError {
  return new CniError(CniErrorCode.INVALID_ENVIRONMENT, msg, details);
}

export function parseCommand(env: CniEnv): CniCommand {
  const cmd = env.CNI_COMMAND;
  if (cmd === undefined || cmd === '') throw badEnv('required env variables [CNI_COMMAND] missing');
  if (!(COMMANDS as readonly string[]).includes(cmd)) {
    throw badEnv(`unknown CNI_COMMAND: ${cmd}`, `supported commands: ${COMMANDS.join(', ')}`);
  }
  return cmd as CniCommand;
}

export function validateContainerId(id: string): void {
  if (!CONTAINER_ID.test(id)) {
    throw badEnv(
      'invalid characters in CNI_CONTAINERID',
      `"${id}" must start with a letter or digit followed by letters, digits, "_", "." or "-"`,
    );
  }
}

// Linux's rules for interface names (dev_valid_name), in bytes.
export function validateIfName(name: string): void {
  if (Buffer.byteLength(name) > 15) throw badEnv(`CNI_IFNAME "${name}" is longer than 15 bytes`);
  if (name === '.' || name === '..') throw badEnv(`CNI_IFNAME "${name}" is not a valid interface name`);
  if (/[/:\s]/u.test(name)) throw badEnv(`CNI_IFNAME "${name}" contains "/", ":" or whitespace`);
}

export function parseCniRequest(env: CniEnv, stdin: string): CniRequest {
  const command = parseCommand(env);
  // VERSION is answered whatever stdin holds, like the skeleton does.
  if (command === 'VERSION') return { command };

  const missing = REQUIRED[command].filter((k) => !env[k]);
  if (missing.length > 0) throw badEnv(`required env variables [${missing.join(',')}] missing`);

  const raw = decodeStdin(stdin);
  const version = configVersion(raw);
  const minimum = MINIMUM_VERSION[command];
  if (minimum && !cniVersionAtLeast(version, minimum)) {
    throw new CniError(
      CniErrorCode.INCOMPATIBLE_VERSION,
      `config version ${version} does not allow ${command}`,
      `${command} needs cniVersion ${minimum} or later`,
    );
  }

  if (command === 'STATUS' || command === 'GC') {
    const config = parseNetworkConfig(raw, version);
    if (command === 'STATUS') return { command, config };
    // Fail closed: without the list, "keep nothing" would detach every workload on the node.
    if (!config.validAttachments) {
      throw new CniError(
        CniErrorCode.INVALID_NETWORK_CONFIG,
        'GC needs "cni.dev/valid-attachments" in the network config',
        'refusing to guess which attachments are still in use',
      );
    }
    return { command, config, validAttachments: config.validAttachments };
  }

  const containerId = env.CNI_CONTAINERID ?? '';
  const ifName = env.CNI_IFNAME ?? '';
  validateContainerId(containerId);
  validateIfName(ifName);
  const config = parseNetworkConfig(raw, version);

  if (command === 'DEL') {
    // DEL ignores CNI_ARGS: it needs none of it, and a DEL that fails on a malformed pair would keep
    // the runtime from ever releasing the attachment.
    const del: DelRequest = { command, containerId, ifName, config };
    if (env.CNI_NETNS) del.netns = env.CNI_NETNS;
    return del;
  }

  const netns = env.CNI_NETNS ?? '';
  if (!netns.startsWith('/')) throw badEnv(`CNI_NETNS "${netns}" must be an absolute path`);
  if (command === 'CHECK' && !config.prevResult) {
    throw new CniError(
      CniErrorCode.INVALID_NETWORK_CONFIG,
      'CHECK needs "prevResult" in the network config',
      'the runtime must pass the result of the preceding ADD',
    );
  }
  return { command, containerId, netns, ifName, args: parseCniArgs(env.CNI_ARGS), config };
}
