import * as fs from 'node:fs';
import type { Command } from 'commander';
import type { Etcd3 } from 'etcd3';
import { DEFAULT_CONFIG, type EtcdConfig } from '../core/config';
import { loadConfigFile } from '../core/daemon/config-file';
import { mergeConfig } from '../core/daemon/config-check';
import type { BlockRegistry } from '../sources/etcd/block-registry';
import { EXIT, parseTimeoutSeconds } from './client-commands';
import { json, table } from './output';

// Cluster-wide operations of the etcd pool source. They talk to etcd directly (not to a daemon): a
// dead node's daemon cannot answer, and these are what an operator runs about dead nodes.

interface ClusterOpts {
  config?: string;
  etcdEndpoints?: string;
  etcdPrefix?: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  timeout: string;
  json?: boolean;
  force?: boolean;
  dpu?: string;
}

/** etcd settings: the daemon's config file if given, then these flags. */
function etcdSettings(opts: ClusterOpts): EtcdConfig {
  const file = opts.config ? loadConfigFile(opts.config) : {};
  const config = mergeConfig(DEFAULT_CONFIG, file, {
    etcd: {
      endpoints: opts.etcdEndpoints?.split(',').filter((e) => e !== ''),
      prefix: opts.etcdPrefix,
      ca: opts.etcdCa,
      cert: opts.etcdCert,
      key: opts.etcdKey,
    },
  });
  if (config.etcd.endpoints.length === 0)
    throw new Error('no etcd endpoints: pass --etcd-endpoints URL[,URL...] or --config with etcd.endpoints');
  return config.etcd;
}

async function withRegistry(opts: ClusterOpts, fn: (r: BlockRegistry) => Promise<number>): Promise<void> {
  let client: Etcd3 | undefined;
  try {
    const e = etcdSettings(opts);
    const timeoutMs = Number(opts.timeout) * 1000;
    // Imported here, not at the top: every workloadnet command (the daemon too) loads this file.
    const { Etcd3 } = await import('etcd3');
    const { BlockRegistry } = await import('../sources/etcd/block-registry');
    client = new Etcd3({
      hosts: e.endpoints,
      dialTimeout: timeoutMs,
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + timeoutMs }),
      credentials: e.ca
        ? {
            rootCertificate: fs.readFileSync(e.ca),
            certChain: e.cert ? fs.readFileSync(e.cert) : undefined,
            privateKey: e.key ? fs.readFileSync(e.key) : undefined,
          }
        : undefined,
    });
    process.exitCode = await fn(new BlockRegistry(client, e.prefix));
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    const unreachable = /UNAVAILABLE|DEADLINE|ECONNREFUSED|No connection|circuit/i.test(message);
    process.stderr.write(
      `workloadnet: ${unreachable ? 'cannot reach etcd: ' : ''}${message.split('\n')[0]}\n`,
    );
    process.exitCode = unreachable ? EXIT.unreachable : EXIT.error;
  } finally {
    client?.close();
  }
}

function etcdCommand(parent: Command, name: string, description: string): Command {
  return parent
    .command(name)
    .description(description)
    .option('-c, --config <file>', "the daemon's JSON config file, for its etcd settings")
    .option('--etcd-endpoints <urls>', 'comma-separated etcd client URLs (overrides the config file)')
    .option('--etcd-prefix <prefix>', `key prefix (default ${DEFAULT_CONFIG.etcd.prefix})`)
    .option('--etcd-ca <file>', 'CA of the etcd server certificates')
    .option('--etcd-cert <file>', 'client certificate for mutual TLS')
    .option('--etcd-key <file>', 'client key for mutual TLS')
    .option('--timeout <seconds>', 'give up on etcd after this long', parseTimeoutSeconds, '10');
}

export function registerClusterCommand(program: Command): void {
  const cluster = program
    .command('cluster')
    .description('cluster-wide address blocks of the etcd pool source (talks to etcd, not to a daemon)')
    .addHelpText(
      'after',
      '\nExamples:\n  workloadnet cluster blocks --etcd-endpoints http://10.0.0.1:2379\n' +
        '  workloadnet cluster release-node worker-7 -c /etc/workloadnet/config.json',
    );
  registerBlocksCommand(cluster);
  registerReleaseNodeCommand(cluster);
}

/** `cluster blocks`: every claimed block, its owner, and whether that node is alive. */
function registerBlocksCommand(cluster: Command): void {
  etcdCommand(cluster, 'blocks', 'list every claimed address block, its node, and whether that node is alive')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExample:\n  workloadnet cluster blocks --etcd-endpoints http://10.0.0.1:2379 --json',
    )
    .action((opts: ClusterOpts) =>
      withRegistry(opts, async (r) => {
        const [blocks, alive] = await Promise.all([r.affinities(), r.aliveNodes()]);
        const rows = [...blocks].map(([block, { node, endpoint }]) => ({
          block,
          node,
          ...(endpoint !== undefined ? { endpoint } : {}),
          nodeAlive: alive.has(node),
        }));
        rows.sort((a, b) => a.node.localeCompare(b.node) || a.block.localeCompare(b.block));
        process.stdout.write(
          opts.json
            ? json({ blocks: rows, aliveNodes: [...alive].sort() })
            : table(
                ['BLOCK', 'NODE', 'DPU', 'NODE ALIVE'],
                rows.map((x) => [x.block, x.node, x.endpoint ?? '-', x.nodeAlive ? 'yes' : 'no']),
              ),
        );
        return EXIT.ok;
      }),
    );
}

/** `cluster release-node`: a dead node's (or one DPU's) blocks given back, refused while it lives. */
function registerReleaseNodeCommand(cluster: Command): void {
  etcdCommand(cluster, 'release-node', "give a dead node's address blocks back to the cluster")
    .argument('<name>', 'node name')
    .option('--dpu <id>', 'only the blocks claimed for this DPU (agent id) of the node')
    .option('--force', 'release even though the node looks alive (its alive key exists)')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nOnly for a node (or, with --dpu, a DPU) that is gone for good: its workloads must not run any\n' +
        'more, or their addresses will be handed out twice. Refused while the node is alive unless\n' +
        '--force (a live daemon gives back the empty blocks of a DPU unseen for dpu.goneGraceSeconds\n' +
        'by itself).\n' +
        'Examples:\n  workloadnet cluster release-node worker-7 --etcd-endpoints http://10.0.0.1:2379\n' +
        '  workloadnet cluster release-node worker-7 --dpu bf3-0 -c /etc/workloadnet/config.json',
    )
    .action((name: string, opts: ClusterOpts) =>
      withRegistry(opts, async (r) => {
        const which = opts.dpu === undefined ? `node ${name}` : `DPU ${opts.dpu} of node ${name}`;
        if (opts.dpu === '') {
          process.stderr.write('workloadnet: --dpu needs a DPU agent id (as `cluster blocks` lists it)\n');
          return EXIT.error;
        }
        const alive = await r.aliveNodes();
        if (alive.has(name) && !opts.force) {
          process.stderr.write(
            `workloadnet: node ${name} is alive (its daemon holds its alive key): the blocks of ${which} may ` +
              "hold running workloads' addresses. Stop it first, wait for its alive key to expire, or pass " +
              '--force.\n',
          );
          return EXIT.error;
        }
        // Its DPUs' blocks too (or one DPU's only): each is released with the exact owner its key names.
        const owned = [...(await r.affinities())].filter(
          ([, o]) => o.node === name && (opts.dpu === undefined || o.endpoint === opts.dpu),
        );
        const released: string[] = [];
        for (const [block, owner] of owned) if (await r.release(block, owner)) released.push(block);
        process.stdout.write(
          opts.json
            ? json({ node: name, ...(opts.dpu !== undefined ? { dpu: opts.dpu } : {}), released })
            : `released ${released.length} block${released.length === 1 ? '' : 's'} of ${which}` +
                (released.length ? `: ${released.join(', ')}` : '') +
                '\n',
        );
        return EXIT.ok;
      }),
    );
}
