// The simulator's command line: every option, parsed and checked as it is read. Its own file because
// the options are the simulator's contract with the tests and the operators that start it (what each
// fault, the dataplane and the protocol range mean), apart from how main.ts puts the agent together.

import * as net from 'node:net';
import { Command, InvalidArgumentError, Option } from 'commander';
import { MIN_PROTOCOL_VERSION, PROTOCOL_VERSION } from './agent-client';
import { INJECTED_CODES, type InjectedErrorCode } from './fault-injection';

/** Exit code of an injected crash, so a test can tell it from a real one. */
export const CRASH_EXIT_CODE = 70;

export interface CliOptions {
  controller: string;
  agentId: string;
  bootId?: string;
  dataplane: 'none' | 'netns';
  keepVfs: boolean;
  dpuNetns?: string;
  hostNetns?: string;
  stateFile?: string;
  ackLatencyMs: number;
  stateWriteDelayMs: number;
  errorRate: number;
  errorCode: InjectedErrorCode;
  dropStreamAfter: number;
  crashAfter: number;
  ignoreSnapshot: boolean;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsServerName?: string;
  maxPorts: number;
  pfs: number;
  vfsPerPf: number;
  protocol: { min: number; max: number };
  withoutFeatures: string[];
  fabric: boolean;
  vtepAddress?: string;
  seed?: number;
  backoffMaxMs: number;
  logLevel: string;
}

function nonNegativeInt(v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('expected a whole number >= 0');
  return n;
}

function rate(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 1)
    throw new InvalidArgumentError('expected a number between 0 and 1');
  return n;
}

function versionRange(v: string): { min: number; max: number } {
  const m = /^(\d+)(?:-(\d+))?$/.exec(v);
  const min = Number(m?.[1]);
  const max = m?.[2] === undefined ? min : Number(m[2]);
  if (!m || min < 1 || max < min) throw new InvalidArgumentError('expected VERSION or MIN-MAX, e.g. 1-2');
  return { min, max };
}

function ipAddress(v: string): string {
  if (net.isIP(v) === 0) throw new InvalidArgumentError('expected an IPv4 or IPv6 address');
  return v;
}

function featureList(v: string): string[] {
  return v.split(',').filter(Boolean);
}

function controllerTarget(v: string): string {
  if (v.startsWith('unix:')) {
    if (!v.slice(5).startsWith('/')) throw new InvalidArgumentError('expected unix:/absolute/path');
    return v;
  }
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:/\s]+):\d{1,5}$/.test(v))
    throw new InvalidArgumentError('expected unix:PATH or HOST:PORT');
  return v;
}

export function buildCommand(): Command {
  const cmd = new Command('workloadnet-dpu-sim').description(
    'Simulated DPU agent: connects to a workloadnet daemon over the DPU agent protocol, keeps its own ' +
      'port table, can inject faults, and can plumb real interfaces in a network namespace standing for the DPU.',
  );
  agentOptions(cmd);
  faultOptions(cmd);
  tlsOptions(cmd);
  offerOptions(cmd);
  runOptions(cmd);
  return cmd;
}

/** Whom the agent speaks to, as whom, and what stands for the DPU's dataplane. */
function agentOptions(cmd: Command): void {
  cmd
    .requiredOption(
      '--controller <target>',
      'daemon to connect to: unix:PATH or HOST:PORT (TCP needs --tls-*)',
      controllerTarget,
    )
    .requiredOption('--agent-id <id>', 'agent identity (over TLS it must match the certificate CN or a SAN)')
    .option(
      '--boot-id <id>',
      'boot identity; reusing the one in --state-file keeps its ports (default: a new random id = state lost)',
    )
    .addOption(
      new Option(
        '--dataplane <mode>',
        'none: control plane only; netns: real veths between --host-netns and --dpu-netns',
      )
        .choices(['none', 'netns'])
        .default('none'),
    )
    .option(
      '--dpu-netns <name>',
      'netns mode: name (under /var/run/netns) or path of the namespace standing for the DPU',
    )
    .option(
      '--keep-vfs',
      'netns mode: a start keeps the VFs (and representors) an earlier one left, each for its port, as a ' +
        'DPU whose agent restarts keeps its NIC running; without it a new boot removes them (a power cycle)',
      false,
    )
    .option(
      '--host-netns <path>',
      "netns mode: namespace where the ports' VF ends appear (the daemon's host side); default this process's",
    )
    .option(
      '--state-file <file>',
      'JSON file rewritten atomically on every change: {agentId, bootId, synced, session, ports}',
    );
}

/** The faults it injects on request: slow acks and disk, refusals, a dropped stream, a crash. */
function faultOptions(cmd: Command): void {
  cmd
    .option('--ack-latency-ms <n>', 'delay every ack by N ms', nonNegativeInt, 0)
    .option(
      '--state-write-delay-ms <n>',
      'a slow disk: each --state-file write lands N ms after it was taken (acks wait for it)',
      nonNegativeInt,
      0,
    )
    .option('--error-rate <p>', 'refuse each Upsert with probability p (0..1)', rate, 0)
    .addOption(
      new Option('--error-code <code>', 'ack code of refused Upserts')
        .choices(Object.keys(INJECTED_CODES))
        .default('internal'),
    )
    .option(
      '--drop-stream-after <n>',
      'cancel the stream instead of handling the Nth change, once (0 = never)',
      nonNegativeInt,
      0,
    )
    .option(
      '--crash-after <n>',
      `exit with code ${CRASH_EXIT_CODE} right after acking the Nth change (0 = never)`,
      nonNegativeInt,
      0,
    )
    .option(
      '--ignore-snapshot',
      'treat snapshot markers as unknown: never remove stale ports (a broken agent)',
      false,
    );
}

/** TLS towards a HOST:PORT daemon. */
function tlsOptions(cmd: Command): void {
  cmd
    .option('--tls-cert <file>', 'client certificate (PEM) for HOST:PORT controllers')
    .option('--tls-key <file>', 'client key (PEM)')
    .option('--tls-ca <file>', 'CA (PEM) that signed the daemon certificate')
    .option('--tls-server-name <name>', 'expected name in the daemon certificate, when it differs from HOST');
}

/** What the agent offers in its hello: capacity, protocol range, features, the fabric. */
function offerOptions(cmd: Command): void {
  cmd
    .option(
      '--max-ports <n>',
      'port table size; further ports are refused with NO_RESOURCES (0 = unlimited)',
      nonNegativeInt,
      0,
    )
    .option('--pfs <n>', 'PFs of the simulated DPU (1-64)', nonNegativeInt, 2)
    .option(
      '--vfs-per-pf <n>',
      'VFs per PF (1-4096); one per port, NO_RESOURCES when none is free',
      nonNegativeInt,
      2048,
    )
    .addOption(
      new Option('--protocol <versions>', 'protocol versions to offer, VERSION or MIN-MAX')
        .argParser(versionRange)
        .default(
          { min: MIN_PROTOCOL_VERSION, max: PROTOCOL_VERSION },
          `${MIN_PROTOCOL_VERSION}-${PROTOCOL_VERSION}`,
        ),
    )
    .option(
      '--without-features <list>',
      'comma-separated features not to advertise (and to refuse), e.g. qos-rate,pf-select',
      featureList,
    )
    .option(
      '--no-fabric',
      'carry no fabric: never advertise "fabric-vxlan" nor state an uplink (protocol version 3 still spoken)',
    )
    .option(
      '--vtep-address <address>',
      "the VTEP (uplink) address to state in Hello; netns mode defaults to the DPU namespace's default-route " +
        'interface address, none mode carries the fabric only when given one',
      ipAddress,
    );
}

/** How it runs: the fault seed, the reconnect backoff, the log; and the help's examples. */
function runOptions(cmd: Command): void {
  cmd
    .option('--seed <n>', 'seed for --error-rate decisions (default: random)', nonNegativeInt)
    .option('--backoff-max-ms <n>', 'longest wait between reconnect attempts', nonNegativeInt, 2000)
    .addOption(
      new Option('--log-level <level>', 'log level (JSON lines on stderr)')
        .choices(['trace', 'debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    )
    .addHelpText(
      'after',
      `
Examples:
  workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-0 --state-file /tmp/dpu-0.json
  workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-1 --pfs 2 --vfs-per-pf 64
  workloadnet-dpu-sim --controller 10.0.0.1:7443 --agent-id dpu-0 --tls-cert a.crt --tls-key a.key --tls-ca ca.crt
  ip netns add dpu && workloadnet-dpu-sim --controller unix:/run/workloadnet/agent.sock --agent-id dpu-0 \\
      --dataplane netns --dpu-netns dpu

Exit codes: 0 after SIGTERM/SIGINT, ${CRASH_EXIT_CODE} after --crash-after, 1 on a startup error.`,
    );
}
