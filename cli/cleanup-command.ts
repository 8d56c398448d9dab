import type { Command } from 'commander';
import { uninstallCni, type UninstalledCni } from '../adapters/cni/uninstall';
import { tearDownNode, type TeardownReport } from '../backends/linux/node-teardown';
import { removeFabricAnnotation } from '../sources/kubernetes/fabric-annotation-removal';
import { DEFAULT_CONFIG, nodeNameOf, type DaemonConfig } from '../core/config';
import { loadConfigFile } from '../core/daemon/config-file';
import { mergeConfig } from '../core/daemon/config-check';
import { NodeLock } from '../core/daemon/node-lock';
import { failedPrecondition } from '../core/errors';
import { silentLogger } from '../core/logger';
import { checkStore } from '../core/store/store-check';
import { EXIT } from './client-commands';
import { json } from './output';

// `workloadnet cleanup`: the node as it was before workloadnet, for an uninstall. A stopped daemon
// leaves its fabric in the kernel on purpose (a restart must not cut pods off), so removing it for good
// is a command of its own, run once the daemon is gone: it takes the node lock first (a daemon serving
// the node makes it refuse, having changed nothing), and refuses while the store still records
// attachments (their pods would keep host links and lose their routes to other nodes).

interface CleanupOpts {
  config?: string;
  stateDir?: string;
  hostNetns?: string;
  confDir: string;
  binDir: string;
  keepCni?: boolean;
  force?: boolean;
  dryRun?: boolean;
  json?: boolean;
}

interface CleanupReport {
  dryRun: boolean;
  node: TeardownReport;
  cni?: UninstalledCni;
  /** What this command leaves, for the operator. */
  left: string[];
}

export function registerCleanupCommand(program: Command): void {
  program
    .command('cleanup')
    .description(
      "remove what the daemon leaves on a node after it is stopped for good (uninstall): the fabric's " +
        'routes, VXLAN device and nftables tables, and the CNI config install-cni wrote',
    )
    .option(
      '-c, --config <file>',
      "take the state directory and host namespace from the daemon's config file",
    )
    .option('--state-dir <dir>', `state store directory (default ${DEFAULT_CONFIG.stateDir})`)
    .option('--host-netns <path>', 'the network namespace the daemon programmed (default: this one)')
    .option('--conf-dir <dir>', 'CNI configuration directory', '/etc/cni/net.d')
    .option('--bin-dir <dir>', 'CNI binary directory', '/opt/cni/bin')
    .option('--keep-cni', 'leave the CNI config directory and the forwarder as they are')
    .option('--force', 'clean even though the store still records attachments (their pods lose the fabric)')
    .option('--dry-run', 'say what would be removed, remove nothing')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
Run it after the daemon is stopped for good (a running daemon makes it refuse) and its pods are
detached (workloadnet gc --all while the daemon runs, or delete the pods). Only objects that carry
workloadnet's mark are removed; configs install-cni moved aside are renamed back. Kept: the state
store and etcd's address blocks: the output says how to remove each. With the Kubernetes pool
source, the Node's workloadnet.io/fabric annotation is removed too.

Exit code 0 when everything of ours is gone, 1 when something could not be removed, 3 when it refused.

Examples:
  workloadnet cleanup --dry-run -c /etc/workloadnet/config.json
  workloadnet cleanup -c /etc/workloadnet/config.json`,
    )
    .action(async (opts: CleanupOpts) => {
      const file = opts.config ? loadConfigFile(opts.config) : {};
      const config = mergeConfig(DEFAULT_CONFIG, file, {
        stateDir: opts.stateDir,
        linux: { hostNetns: opts.hostNetns },
      });
      const lock = new NodeLock(config, silentLogger());
      try {
        await lock.start();
      } catch (err) {
        process.stderr.write(`workloadnet: ${(err as Error).message}\n`);
        process.exitCode = EXIT.notReady;
        return;
      }
      try {
        const report = await cleanup(config, opts);
        process.stdout.write(opts.json ? json(report) : formatReport(report));
        process.exitCode = report.node.failed.length > 0 ? EXIT.error : EXIT.ok;
      } catch (err) {
        process.stderr.write(`workloadnet: ${(err as Error).message}\n`);
        process.exitCode = EXIT.notReady;
      } finally {
        await lock.stop();
      }
    });
}

async function cleanup(config: DaemonConfig, opts: CleanupOpts): Promise<CleanupReport> {
  const store = await checkStore(config.stateDir);
  const attachments = store.attachments ?? 0;
  if (attachments > 0 && !opts.force)
    throw failedPrecondition(
      `the store ${store.file} still records ${attachments} attachments: detach them first ` +
        '(start the daemon and run workloadnet gc --all, or delete the pods), or pass --force to remove ' +
        'the fabric under them (their pods lose every other node). Nothing was changed',
    );
  const dryRun = opts.dryRun === true;
  const node = await tearDownNode({ hostNetnsPath: config.linux.hostNetns, dryRun });
  const cni = opts.keepCni
    ? undefined
    : await uninstallCni({ confDir: opts.confDir, binDir: opts.binDir, dryRun });
  const nodeName = nodeNameOf(config);
  if (config.poolSource === 'kubernetes') {
    try {
      const had = await removeFabricAnnotation({ nodeName, kubeconfig: config.kubeconfig, dryRun });
      if (had) node.removed.push(`the workloadnet.io/fabric annotation of Node ${nodeName}`);
    } catch (err) {
      node.failed.push(
        `${(err as Error).message} (by hand: kubectl annotate node ${nodeName} workloadnet.io/fabric-)`,
      );
    }
  }
  const left = [`the state store ${config.stateDir} (rm -r it, or keep it to reinstall with the same pods)`];
  if (config.poolSource === 'etcd')
    left.push(`this node's address blocks in etcd: workloadnet cluster release-node ${nodeName}`);
  return { dryRun, node, ...(cni ? { cni } : {}), left };
}

function formatReport(r: CleanupReport): string {
  const verb = r.dryRun ? 'would remove' : 'removed';
  const lines: string[] = [];
  for (const w of r.node.removed) lines.push(`${verb} ${w}`);
  for (const f of r.cni?.restored ?? [])
    lines.push(`${r.dryRun ? 'would rename' : 'renamed'} ${f.from} back to ${f.to}`);
  for (const f of r.cni?.removed ?? []) lines.push(`${verb} ${f}`);
  if (r.cni?.binary) lines.push(`${verb} ${r.cni.binary}`);
  for (const f of r.cni?.kept ?? []) lines.push(`kept ${f}: a file of its original name exists again`);
  if (lines.length === 0) lines.push('nothing of workloadnet found on this node');
  for (const f of r.node.failed) lines.push(`error: ${f}`);
  for (const l of r.left) lines.push(`left: ${l}`);
  return lines.join('\n') + '\n';
}
