import * as path from 'node:path';
import type { Command } from 'commander';
import { installCni, parseChain, type InstalledCni } from '../adapters/cni/install';
import { DEFAULT_CONFIG, DEFAULT_NETWORK } from '../core/config';
import { invalidArgument } from '../core/errors';

// `workloadnet install-cni`: the forwarder and the conflist, and what happened to the directory's
// other configs, said in words (a config moved aside is a network the runtime no longer uses).

interface InstallCniFlags {
  binDir: string;
  confDir: string;
  cniSocket: string;
  name: string;
  network?: string;
  mtu?: string;
  force?: boolean;
  chain?: string;
  pluginsFrom?: string;
  keepOthers?: boolean;
}

export function registerInstallCniCommand(program: Command): void {
  program
    .command('install-cni')
    .description('install the workloadnet-cni forwarder and a conflist for container runtimes')
    .option('--bin-dir <dir>', 'CNI binary directory', '/opt/cni/bin')
    .option('--conf-dir <dir>', 'CNI configuration directory', '/etc/cni/net.d')
    .option('--cni-socket <path>', 'the daemon’s CNI socket', DEFAULT_CONFIG.cniSocket)
    .option('--name <name>', 'network name in the conflist', 'workloadnet')
    .option(
      '--network <name>',
      'the daemon network (config "networks") this conflist selects: names the conflist after it; ' +
        'a network other than "default" is written as 90-<name>.conflist, after the runtime’s default',
    )
    .option('--mtu <n>', 'MTU to put in the conflist (default: the daemon’s)')
    .option(
      '--chain <plugins>',
      'run these reference plugins after workloadnet: portmap (hostPort), bandwidth (traffic shaping); ' +
        'each must be in --bin-dir or --plugins-from',
    )
    .option(
      '--plugins-from <dir>',
      'copy a chained plugin from here when --bin-dir has none (one already there is left as it is)',
    )
    .option(
      '--keep-others',
      'leave other plugins’ configs in --conf-dir (by default they are renamed *.workloadnet-disabled, ' +
        'so the runtime cannot take one instead of ours)',
    )
    .option(
      '--force',
      'overwrite files that were not written by workloadnet, and chain plugins missing from --bin-dir',
    )
    .addHelpText(
      'after',
      `
The pod network's conflist is 05-<name>.conflist, before the usual 10-*: runtimes take the first
config of the directory. The forwarder is dist/bin/workloadnet-cni, built by npm run build when a C
compiler is present.

Examples:
  workloadnet install-cni --bin-dir /opt/cni/bin --conf-dir /etc/cni/net.d
  workloadnet install-cni --chain portmap,bandwidth     hostPort and bandwidth annotations for pods
  workloadnet install-cni --network default             the pod network of a daemon with named networks
  workloadnet install-cni --network fast                a secondary network (e.g. for Multus)`,
    )
    .action(async (opts: InstallCniFlags) => {
      if (opts.network !== undefined && opts.name !== 'workloadnet' && opts.name !== opts.network)
        throw invalidArgument(
          `--name ${opts.name} and --network ${opts.network} disagree: the network's name is the conflist's name; give one`,
        );
      const res = await installCni({
        chain: opts.chain === undefined ? [] : parseChain(opts.chain),
        binDir: opts.binDir,
        confDir: opts.confDir,
        cniSocket: opts.cniSocket,
        name: opts.network ?? opts.name,
        secondary: opts.network !== undefined && opts.network !== DEFAULT_NETWORK,
        force: opts.force ?? false,
        shimPath: path.resolve(__dirname, '..', 'bin', 'workloadnet-cni'),
        mtu: opts.mtu ? Number(opts.mtu) : undefined,
        pluginsFrom: opts.pluginsFrom,
        keepOthers: opts.keepOthers ?? false,
      });
      process.stdout.write(installReport(res));
    });
}

export function installReport(res: InstalledCni): string {
  const lines = [`installed ${res.binary}`];
  for (const p of res.copiedPlugins) lines.push(`installed ${p} (chained; the node had none)`);
  lines.push(`wrote ${res.conflist} (CNI versions ${res.cniVersions.join(', ')})`);
  if (res.versionNote) lines.push(`note: ${res.versionNote}`);
  for (const f of res.superseded) lines.push(`removed ${f}: an older conflist of ours for the same network`);
  for (const m of res.movedAside)
    lines.push(
      `moved ${m.from} aside to ${m.to}: the runtime no longer uses that network (rename it back to restore it)`,
    );
  for (const f of res.shadowedBy)
    lines.push(
      `warning: ${f} sorts before ours and was kept (--keep-others): the runtime takes it as the pod network`,
    );
  return lines.join('\n') + '\n';
}
