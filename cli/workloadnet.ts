#!/usr/bin/env node
import './threadpool';
import './heap-growth';
import { Command, Option } from 'commander';
import { runDaemon, type DaemonFlags } from './daemon-command';
import { registerClientCommands } from './client-commands';
import { registerClusterCommand } from './cluster-command';
import { registerConfigCommand } from './config-command';
import { registerGcCommand } from './gc-command';
import { registerCleanupCommand } from './cleanup-command';
import { registerInstallCniCommand } from './install-cni-command';
import { registerDpusCommand } from './dpus-command';
import { registerLsCommand } from './ls-command';
import { registerPeersCommand } from './peers-command';
import { registerStoreCommands } from './store-command';
import { VERSION } from '../core/serve/api-server';
import { DEFAULT_CONFIG } from '../core/config';

// The workloadnet command: the daemon itself and the operator's client commands. Exit codes that
// scripts can rely on: 0 ok, 1 error, 2 usage error, 3 daemon not ready, 4 daemon unreachable,
// 5 not found.

// No initial [] for repeatable options: commander would print it as a second "(default: [])".
const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

export function buildProgram(): Command {
  const program = new Command('workloadnet')
    .description(
      'Container networking daemon with pluggable Linux (rtnetlink) and DPU dataplanes, and its client.',
    )
    .version(VERSION, '-V, --version', 'print the version')
    // Usage errors exit 2 (commander's default is 1); set before subcommands so they inherit it.
    .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2))
    .showHelpAfterError()
    .addHelpText(
      'after',
      `
Examples:
  workloadnet daemon --pod-cidr 10.88.0.0/16           run the daemon with the Linux backend
  workloadnet daemon --backend dpu --agent-socket /run/workloadnet/agent.sock
  workloadnet status                                    is the node ready to attach workloads?
  workloadnet ls --json                                 every attachment, as JSON
  workloadnet dpus                                      the DPU agents: connected? VFs free? ports?
  workloadnet peers                                     the other nodes: how each is reached
  workloadnet install-cni                               install the CNI forwarder and conflist
  workloadnet config check -c /etc/workloadnet/config.json   would the daemon accept this config?
  workloadnet store check                               is the state store sound? (offline)

Exit codes: 0 ok, 1 error, 2 usage, 3 not ready, 4 daemon unreachable, 5 not found.`,
    );

  program
    .command('daemon')
    .description('run the workloadnet daemon (serves the workload API and the CNI endpoint)')
    .option('-c, --config <file>', 'JSON config file (flags override it)')
    .option('--socket <path>', `workload API socket (default ${DEFAULT_CONFIG.socket})`)
    .option('--cni-socket <path>', `CNI endpoint socket (default ${DEFAULT_CONFIG.cniSocket})`)
    .option('--socket-group <group>', 'group owning the sockets (mode 0660)')
    .option('--state-dir <dir>', `state store directory (default ${DEFAULT_CONFIG.stateDir})`)
    .addOption(
      new Option('--backend <name>', `dataplane backend (default ${DEFAULT_CONFIG.backend})`).choices([
        'linux',
        'dpu',
      ]),
    )
    .option(
      '--pod-cidr <cidr>',
      `address pool, repeatable for dual-stack (default ${DEFAULT_CONFIG.podCidrs.join(', ')})`,
      collect,
    )
    .option(
      '--mtu <n>',
      'workload interface MTU (68-65535), kept exactly; "auto" or 0 (default): with the fabric on, what it carries (the uplink MTU less the encapsulation), else 1500',
    )
    .addOption(
      new Option('--log-level <level>', 'log level (default info)').choices([
        'trace',
        'debug',
        'info',
        'warn',
        'error',
        'fatal',
      ]),
    )
    .option(
      '--metrics-listen <host:port>',
      'serve /metrics, /healthz and /readyz over HTTP here (off by default; no auth, read-only)',
    )
    .option('--host-netns <path>', "linux/dpu: namespace facing the workloads (default: the daemon's own)")
    .option(
      '--agent-socket <path>',
      `dpu: unix socket for agents (default ${DEFAULT_CONFIG.dpu.agentSocket})`,
    )
    .option('--agent-listen <host:port>', 'dpu: also accept agents over TCP with mutual TLS')
    .option('--tls-cert <file>', 'dpu: server certificate for --agent-listen')
    .option('--tls-key <file>', 'dpu: server key for --agent-listen')
    .option('--tls-ca <file>', 'dpu: CA that agent certificates must chain to')
    .option(
      '--sweep-interval-ms <n>',
      `period of the leak sweep that detaches attachments whose namespace is gone; 0 = off (default ${DEFAULT_CONFIG.sweepIntervalMs})`,
    )
    .option(
      '--ack-timeout-ms <n>',
      `dpu: how long Attach waits for the agent (default ${DEFAULT_CONFIG.dpu.ackTimeoutMs})`,
    )
    .addOption(
      new Option(
        '--pool-source <kind>',
        `where address pools come from (default ${DEFAULT_CONFIG.poolSource}: --pod-cidr)`,
      ).choices(['static', 'kubernetes', 'etcd']),
    )
    .option('--node-name <name>', "kubernetes/etcd: this node's name (default: the host name)")
    .option('--kubeconfig <file>', 'kubernetes: kubeconfig (default: $KUBECONFIG, else in-cluster)')
    .option('--etcd-endpoints <urls>', 'etcd: comma-separated client URLs of the etcd members')
    .option(
      '--cluster-cidr <cidr>',
      'etcd: cluster range cut into blocks, one per family (repeatable)',
      collect,
    )
    .option(
      '--block-size <prefixlen>',
      `etcd: IPv4 block prefix length (default ${DEFAULT_CONFIG.etcd.blockSize}; IPv6 blocks /${96 + DEFAULT_CONFIG.etcd.blockSize})`,
    )
    .option('--etcd-prefix <prefix>', `etcd: key prefix (default ${DEFAULT_CONFIG.etcd.prefix})`)
    .option('--etcd-ca <file>', 'etcd: CA of the etcd server certificates (https endpoints)')
    .option('--etcd-cert <file>', 'etcd: client certificate for mutual TLS')
    .option('--etcd-key <file>', 'etcd: client key for mutual TLS')
    .option(
      '--empty-block-grace-seconds <n>',
      `etcd: give back a block empty this long (default ${DEFAULT_CONFIG.etcd.emptyBlockGraceSeconds})`,
    )
    .addOption(
      new Option(
        '--fabric <mode>',
        'fabric between nodes (default auto: off with --pool-source static, hybrid with kubernetes/etcd)',
      ).choices(['auto', 'off', 'routed', 'vxlan', 'hybrid', 'external']),
    )
    .option(
      '--node-ip <address>',
      "fabric: this node's underlay address (default: that of the default route)",
    )
    .option(
      '--peers-file <file>',
      'fabric: JSON file of the other nodes (static peer source), reloaded on change',
    )
    .addHelpText(
      'after',
      '\nExamples:\n  workloadnet daemon --pod-cidr 10.88.0.0/16 --pod-cidr fd00:88::/64 --mtu 1450\n' +
        '  workloadnet daemon --pool-source kubernetes --node-name worker-1\n' +
        '  workloadnet daemon --pool-source etcd --etcd-endpoints http://10.0.0.1:2379 --cluster-cidr 10.96.0.0/12\n' +
        '  workloadnet daemon --pod-cidr 10.244.1.0/24 --fabric vxlan --peers-file /etc/workloadnet/peers.json',
    )
    .action((flags: DaemonFlags) => runDaemon(flags));

  registerClientCommands(program);
  registerGcCommand(program);
  registerInstallCniCommand(program);
  registerCleanupCommand(program);
  registerConfigCommand(program);
  registerLsCommand(program);
  registerClusterCommand(program);
  registerDpusCommand(program);
  registerPeersCommand(program);
  registerStoreCommands(program);
  return program;
}

/**
 * The reader of stdout went away (`workloadnet peers | head`): stop quietly, as a command killed by
 * SIGPIPE does, instead of dying on an unhandled EPIPE with a stack trace. Node ignores SIGPIPE, so a
 * write to a closed pipe fails with EPIPE instead.
 */
export function exitQuietlyOnClosedStdout(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    process.stderr.write(`workloadnet: cannot write to stdout: ${err.message}\n`);
    process.exit(1);
  });
}

if (require.main === module) {
  exitQuietlyOnClosedStdout();
  buildProgram()
    .parseAsync(process.argv)
    .catch((err: unknown) => {
      process.stderr.write(`workloadnet: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    });
}
