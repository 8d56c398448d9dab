import { spawn } from 'node:child_process';
import * as path from 'node:path';

// A network configuration list run as libcni runs it for a runtime on the node: each plugin of the
// list in order on ADD, each one's result handed to the next as prevResult, and in reverse order on
// DEL with the cached ADD result; every plugin gets the list's name and cniVersion, and the runtime's
// capability arguments (portMappings, bandwidth, …) as runtimeConfig only where it declares that
// capability. The plugins run in the node's network namespace, where a runtime runs them (portmap
// writes the node's iptables there).

export interface CniPlugin {
  type: string;
  capabilities?: Record<string, boolean>;
  [key: string]: unknown;
}

export interface CniConflist {
  cniVersion: string;
  name: string;
  plugins: CniPlugin[];
}

export interface CniCall {
  containerId: string;
  /** The pod's network namespace (path). */
  netns: string;
  ifName?: string;
  /** What the runtime passes as capability arguments, e.g. { portMappings: [...] }. */
  capabilityArgs?: Record<string, unknown>;
}

export interface CniChainOptions {
  conflist: CniConflist;
  /** CNI_PATH: where the plugins are found. */
  binDir: string;
  /** The node's network namespace (path): the plugins run in it. */
  nodeNetns: string;
  /** Changes a plugin's entry before it is sent (e.g. a node path the test keeps elsewhere). */
  rewrite?: (plugin: CniPlugin) => CniPlugin;
}

export class CniChain {
  constructor(private readonly opts: CniChainOptions) {}

  /** ADD through every plugin in order: the last plugin's result. Throws naming the plugin that failed. */
  async add(call: CniCall): Promise<unknown> {
    let prevResult: unknown;
    for (const plugin of this.opts.conflist.plugins)
      prevResult = await this.run('ADD', plugin, call, prevResult);
    return prevResult;
  }

  /** DEL through every plugin in reverse order, each given the ADD result as libcni caches it. */
  async del(call: CniCall, addResult: unknown): Promise<void> {
    for (const plugin of [...this.opts.conflist.plugins].reverse())
      await this.run('DEL', plugin, call, addResult);
  }

  private async run(
    command: 'ADD' | 'DEL',
    plugin: CniPlugin,
    call: CniCall,
    prevResult: unknown,
  ): Promise<unknown> {
    const { conflist, binDir } = this.opts;
    const runtimeConfig: Record<string, unknown> = {};
    for (const [cap, on] of Object.entries(plugin.capabilities ?? {}))
      if (on && call.capabilityArgs?.[cap] !== undefined) runtimeConfig[cap] = call.capabilityArgs[cap];
    const conf = {
      ...(this.opts.rewrite ? this.opts.rewrite(plugin) : plugin),
      cniVersion: conflist.cniVersion,
      name: conflist.name,
      ...(Object.keys(runtimeConfig).length > 0 ? { runtimeConfig } : {}),
      ...(prevResult !== undefined ? { prevResult } : {}),
    };
    const env = {
      PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_COMMAND: command,
      CNI_CONTAINERID: call.containerId,
      CNI_NETNS: call.netns,
      CNI_IFNAME: call.ifName ?? 'eth0',
      CNI_PATH: binDir,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${call.containerId};K8S_POD_INFRA_CONTAINER_ID=${call.containerId}`,
    };
    const out = await spawnWith(
      'nsenter',
      [`--net=${this.opts.nodeNetns}`, '--', path.join(binDir, plugin.type)],
      env,
      JSON.stringify(conf),
    );
    if (out.code !== 0)
      throw new Error(
        `${command} of plugin ${plugin.type} failed (exit ${out.code}): ${out.stdout}${out.stderr}`,
      );
    return command === 'ADD' ? (JSON.parse(out.stdout) as unknown) : undefined;
  }
}

function spawnWith(
  file: string,
  args: string[],
  env: Record<string, string>,
  stdin: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: 'pipe' });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(stdin);
  });
}
