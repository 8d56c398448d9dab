#!/usr/bin/env node
import './threadpool';
import './heap-growth';
import { Command } from 'commander';
import { registerDaemonCommand } from './daemon-options';
import { registerClientCommands } from './client-commands';
import { registerClusterCommand } from './cluster-command';
import { registerConfigCommand } from './config-command';
import { registerGcCommand } from './gc-command';
import { registerCleanupCommand } from './cleanup-command';
import { registerInstallCniCommand } from './install-cni-command';
import { registerDpusCommand } from './dpus-command';
import { registerLsCommand } from './ls-command';
import { registerPeersCommand } from './peers-command';
import { registerPolicyCommand } from './policy-command';
import { registerStoreCommands } from './store-command';
import { VERSION } from '../core/serve/api-server';

// The workloadnet command: the daemon itself and the operator's client commands. Exit codes that
// scripts can rely on: 0 ok, 1 error, 2 usage error, 3 daemon not ready, 4 daemon unreachable,
// 5 not found.

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
  workloadnet policy prod/web-0                         what NetworkPolicy enforces for a pod here
  workloadnet install-cni                               install the CNI forwarder and conflist
  workloadnet config check -c /etc/workloadnet/config.json   would the daemon accept this config?
  workloadnet store check                               is the state store sound? (offline)

Exit codes: 0 ok, 1 error, 2 usage, 3 not ready, 4 daemon unreachable, 5 not found.`,
    );

  registerDaemonCommand(program);

  registerClientCommands(program);
  registerGcCommand(program);
  registerInstallCniCommand(program);
  registerCleanupCommand(program);
  registerConfigCommand(program);
  registerLsCommand(program);
  registerClusterCommand(program);
  registerDpusCommand(program);
  registerPeersCommand(program);
  registerPolicyCommand(program);
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
