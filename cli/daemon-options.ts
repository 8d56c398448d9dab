import { Option, type Command } from 'commander';
import { DEFAULT_CONFIG } from '../core/config';
import { runDaemon, type DaemonFlags } from './daemon-command';

// The daemon command as the command line declares it: its options in the groups its help lists them
// in (the node, its DPU agents, where address pools come from, the fabric), each group a function of its
// own so that one more option of a group is read beside its kind.

// No initial [] for repeatable options: commander would print it as a second "(default: [])".
const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

export function registerDaemonCommand(program: Command): void {
  const cmd = program
    .command('daemon')
    .description('run the workloadnet daemon (serves the workload API and the CNI endpoint)');
  fabricOptions(poolSourceOptions(dpuOptions(nodeOptions(cmd))))
    .addHelpText(
      'after',
      '\nExamples:\n  workloadnet daemon --pod-cidr 10.88.0.0/16 --pod-cidr fd00:88::/64 --mtu 1450\n' +
        '  workloadnet daemon --pool-source kubernetes --node-name worker-1\n' +
        '  workloadnet daemon --pool-source etcd --etcd-endpoints http://10.0.0.1:2379 --cluster-cidr 10.96.0.0/12\n' +
        '  workloadnet daemon --pod-cidr 10.244.1.0/24 --fabric vxlan --peers-file /etc/workloadnet/peers.json',
    )
    .action((flags: DaemonFlags) => runDaemon(flags));
}

/** The node's own: config, sockets, state, backend, pools, MTU, logs, metrics, the sweep. */
function nodeOptions(cmd: Command): Command {
  return cmd
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
    .option(
      '--sweep-interval-ms <n>',
      `period of the leak sweep that detaches attachments whose namespace is gone; 0 = off (default ${DEFAULT_CONFIG.sweepIntervalMs})`,
    )
    .option('--host-netns <path>', "linux/dpu: namespace facing the workloads (default: the daemon's own)");
}

/** dpu: how agents reach the daemon, and how long an Attach waits for one. */
function dpuOptions(cmd: Command): Command {
  return cmd
    .option(
      '--agent-socket <path>',
      `dpu: unix socket for agents (default ${DEFAULT_CONFIG.dpu.agentSocket})`,
    )
    .option('--agent-listen <host:port>', 'dpu: also accept agents over TCP with mutual TLS')
    .option('--tls-cert <file>', 'dpu: server certificate for --agent-listen')
    .option('--tls-key <file>', 'dpu: server key for --agent-listen')
    .option('--tls-ca <file>', 'dpu: CA that agent certificates must chain to')
    .option(
      '--ack-timeout-ms <n>',
      `dpu: how long Attach waits for the agent (default ${DEFAULT_CONFIG.dpu.ackTimeoutMs})`,
    );
}

/** Where address pools come from: the static pool, a Node's podCIDRs, or etcd blocks. */
function poolSourceOptions(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--pool-source <kind>',
        `where address pools come from (default ${DEFAULT_CONFIG.poolSource}: --pod-cidr)`,
      ).choices(['static', 'kubernetes', 'etcd']),
    )
    .addOption(
      new Option(
        '--network-policy <mode>',
        'enforce Kubernetes NetworkPolicy (default auto: on with --pool-source kubernetes)',
      ).choices(['auto', 'on', 'off']),
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
    );
}

/** The fabric between nodes. */
function fabricOptions(cmd: Command): Command {
  return cmd
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
    );
}
