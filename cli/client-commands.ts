import { InvalidArgumentError, type Command } from 'commander';
import * as grpc from '@grpc/grpc-js';
import { VERSION } from '../core/serve/api-server';
import { DEFAULT_CONFIG } from '../core/config';
import type { StatusResponse } from '../proto/gen/workloadnet/v1/workload';
import { ApiClient, isUnreachable, unreachableDetails } from './api-client';
import { attachmentJson, formatInspect } from './inspect-format';
import { json } from './output';
import { peerCounts } from './peer-counts';

// The operator's commands. They talk to the daemon only through the public gRPC API.

export const EXIT = { ok: 0, error: 1, usage: 2, notReady: 3, unreachable: 4, notFound: 5 } as const;

interface GlobalOpts {
  socket: string;
  json?: boolean;
  timeout: string;
}

/** How a command failed to get its answer: the words printed, and the exit code. */
export interface ClientFailure {
  message: string;
  code: number;
}

/**
 * Runs `fn` with a client; its answer is the exit code. A failure is printed on stderr, and also given
 * to `onFailure` (status --json prints it as JSON, so that a script reading stdout gets an answer).
 */
export function withClient(
  opts: GlobalOpts,
  fn: (c: ApiClient) => Promise<number>,
  onFailure?: (f: ClientFailure) => void,
): Promise<void> {
  const client = new ApiClient(opts.socket, Number(opts.timeout) * 1000);
  return fn(client).then(
    (code) => {
      client.close();
      process.exitCode = code;
    },
    (err: unknown) => {
      client.close();
      const f = describeFailure(err, opts.socket);
      process.stderr.write(`workloadnet: ${f.message}\n`);
      if (f.code === EXIT.unreachable)
        process.stderr.write('Is it running? (workloadnet daemon, or systemctl status workloadnet)\n');
      onFailure?.(f);
      process.exitCode = f.code;
    },
  );
}

function describeFailure(err: unknown, socket: string): ClientFailure {
  const e = err as Partial<grpc.ServiceError>;
  if (isUnreachable(err))
    return {
      message: `cannot reach the daemon at ${socket}: ${unreachableDetails(e.details ?? '')}`,
      code: EXIT.unreachable,
    };
  if (e.code === undefined)
    return { message: err instanceof Error ? err.message : String(err), code: EXIT.error };
  return {
    message: `${grpc.status[e.code] ?? 'ERROR'}: ${e.details ?? String(err)}`,
    code: e.code === grpc.status.NOT_FOUND ? EXIT.notFound : EXIT.error,
  };
}

/** --timeout: seconds, more than 0 (a fraction is fine); anything else is a usage error (exit 2). */
export function parseTimeoutSeconds(value: string): string {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError(`"${value}" is not a number of seconds greater than 0 (e.g. 5 or 0.5).`);
  return value;
}

export function clientCommand(program: Command, name: string, description: string): Command {
  return program
    .command(name)
    .description(description)
    .option('--socket <path>', 'daemon API socket', process.env.WORKLOADNET_SOCKET ?? DEFAULT_CONFIG.socket)
    .option('--timeout <seconds>', 'give up after this long', parseTimeoutSeconds, '30');
}

export function registerClientCommands(program: Command): void {
  registerStatusCommand(program);
  registerInspectCommand(program);
  registerDetachCommand(program);
  registerVersionCommand(program);
}

function registerStatusCommand(program: Command): void {
  clientCommand(program, 'status', 'show whether the node can attach workloads, and why not')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExit code 3 when the daemon is not ready.\nExample:\n  workloadnet status --json | jq .ready',
    )
    .action((opts: GlobalOpts) =>
      withClient(
        opts,
        async (c) => {
          const st = await c.status();
          process.stdout.write(opts.json ? json(st) : formatStatus(st));
          return st.ready ? EXIT.ok : EXIT.notReady;
        },
        // A script reading `status --json` gets a document whatever happened, with ready false.
        (f) => {
          if (opts.json)
            process.stdout.write(
              json({ ready: false, reachable: f.code !== EXIT.unreachable, error: f.message }),
            );
        },
      ),
    );
}

function registerInspectCommand(program: Command): void {
  clientCommand(program, 'inspect', 'show one workload’s attachments in full')
    .argument('<workload>', 'workload id (the sandbox/container id for CNI)')
    .option('--if-name <name>', 'only this interface')
    .option('--json', 'print the API’s attachments as JSON (addresses as text)')
    .addHelpText(
      'after',
      "\nExit code 5 when the workload is unknown.\nExamples:\n  workloadnet inspect 3f9a2c\n  workloadnet inspect 3f9a2c --json | jq -r '.[0].result.ips[0].cidr'",
    )
    .action((workload: string, opts: GlobalOpts & { ifName?: string }) =>
      withClient(opts, async (c) => {
        const res = await c.call(c.raw.get, { workloadId: workload, ifName: opts.ifName ?? '' });
        process.stdout.write(
          opts.json ? json(res.attachments.map(attachmentJson)) : formatInspect(res.attachments),
        );
        return EXIT.ok;
      }),
    );
}

function registerDetachCommand(program: Command): void {
  clientCommand(program, 'detach', 'detach a workload (admin; runtimes detach through their own calls)')
    .argument('<workload>', 'workload id')
    .option('--if-name <name>', 'only this interface (default: all)')
    .addHelpText(
      'after',
      '\nSucceeds for unknown workloads, like the API.\nExample:\n  workloadnet detach 3f9a2c',
    )
    .action((workload: string, opts: GlobalOpts & { ifName?: string }) =>
      withClient(opts, async (c) => {
        await c.call(c.raw.detach, {
          workloadId: workload,
          netns: { netnsPath: '', ifName: opts.ifName ?? '', mtu: 0 },
        });
        process.stdout.write(`detached ${workload}\n`);
        return EXIT.ok;
      }),
    );
}

function registerVersionCommand(program: Command): void {
  program
    .command('version')
    .description('print the client version (and the daemon’s, when reachable)')
    .option('--socket <path>', 'daemon API socket', process.env.WORKLOADNET_SOCKET ?? DEFAULT_CONFIG.socket)
    .option('--json', 'print JSON')
    .addHelpText('after', '\nExample:\n  workloadnet version --json')
    .action(async (opts: { socket: string; json?: boolean }) => {
      const c = new ApiClient(opts.socket, 2000);
      const daemon = await c.status().then(
        (s) => s.version,
        () => undefined,
      );
      c.close();
      process.stdout.write(
        opts.json
          ? json({ client: VERSION, daemon: daemon ?? null })
          : `client: ${VERSION}\ndaemon: ${daemon ?? 'unreachable'}\n`,
      );
    });
}

function formatStatus(st: StatusResponse): string {
  const lines = [`ready:       ${st.ready ? 'yes' : 'no'}`];
  for (const r of st.reasons) lines.push(`  reason:    ${r}`);
  lines.push(`backend:     ${st.backend}`);
  for (const [k, v] of Object.entries(st.backendDetails)) lines.push(`  ${k}: ${v}`);
  lines.push(`attachments: ${st.attachments}`);
  if (st.poolSource && st.poolSource.kind !== 'static') {
    const src = st.poolSource;
    lines.push(`pool source: ${src.kind} (${src.connected ? 'connected' : 'not connected'})`);
    for (const r of src.reasons) lines.push(`  reason:    ${r}`);
    for (const [k, v] of Object.entries(src.details)) lines.push(`  ${k}: ${v}`);
  }
  for (const p of st.pools)
    lines.push(
      `pool:        ${p.cidr} (IPv${p.family}) ${p.used}/${p.size} used${p.state === 'draining' ? ', draining' : ''}`,
    );
  // One network is the node as it always was; several are listed each with its backend and routing.
  if (st.networks.length > 1)
    for (const n of st.networks) {
      const routing = n.defaultRoute ? 'default route' : `routes ${n.routes.join(',') || '-'}`;
      lines.push(
        `network:     ${n.name} (${n.backend}, mtu ${n.mtu}, ${routing}) ${n.attachments} attached, ${n.ready ? 'ready' : 'not ready'}`,
      );
      for (const r of n.reasons) lines.push(`  reason:    ${r}`);
    }
  // Only once something changed: an MTU that never changed is the common case and says nothing.
  for (const n of st.networks)
    if (n.mtuUpdated > 0 || n.mtuFailed > 0)
      lines.push(
        `mtu change:  network ${n.name}: ${n.mtuUpdated} running interface(s) given mtu ${n.mtu} in place${n.mtuFailed > 0 ? `, ${n.mtuFailed} could not be (see the daemon's log)` : ''}`,
      );
  if (st.fabric && st.fabric.mode !== 'off') {
    const f = st.fabric;
    lines.push(
      `fabric:      ${f.mode}, ${f.ready ? 'ready' : 'not ready'}, ${peerCounts(f)} (workloadnet peers)`,
    );
    for (const r of f.reasons) lines.push(`  reason:    ${r}`);
    for (const w of f.warnings) lines.push(`  warning:   ${w}`);
  }
  if (st.policy) {
    const p = st.policy;
    lines.push(
      `policy:      ${p.ready ? 'ready' : 'not ready'}, ${p.policies} policies, ${p.podsIsolated} pod(s) here isolated, ${p.deniedIngress + p.deniedEgress} packets denied (workloadnet policy)`,
    );
    for (const k of p.unenforced) lines.push(`  unenforced: ${k}`);
  }
  if (st.reconcile) {
    const r = st.reconcile;
    lines.push(
      `reconcile:   at ${r.at}: ${r.healthy} healthy, ${r.repaired} repaired, ${r.released} released, ${r.orphansRemoved} orphans removed${r.adopted ? `, ${r.adopted} adopted` : ''}${r.cutShort ? `, ${r.cutShort} cut short` : ''}`,
    );
    for (const w of r.warnings) lines.push(`  warning:   ${w}`);
  }
  lines.push(`version:     ${st.version}`);
  return lines.join('\n') + '\n';
}
