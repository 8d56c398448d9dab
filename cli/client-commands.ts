import * as path from 'node:path';
import type { Command } from 'commander';
import * as grpc from '@grpc/grpc-js';
import { installCni, parseChain } from '../adapters/cni/install';
import { VERSION } from '../core/serve/api-server';
import { DEFAULT_CONFIG, DEFAULT_NETWORK } from '../core/config';
import { invalidArgument } from '../core/errors';
import type { StatusResponse } from '../proto/gen/workloadnet/v1/workload';
import { ApiClient, isUnreachable } from './api-client';
import { attachmentJson, formatInspect } from './inspect-format';
import { json } from './output';

// The operator's commands. They talk to the daemon only through the public gRPC API.

export const EXIT = { ok: 0, error: 1, usage: 2, notReady: 3, unreachable: 4, notFound: 5 } as const;

interface GlobalOpts {
  socket: string;
  json?: boolean;
  timeout: string;
}

export function withClient(opts: GlobalOpts, fn: (c: ApiClient) => Promise<number>): Promise<void> {
  const client = new ApiClient(opts.socket, Number(opts.timeout) * 1000);
  return fn(client).then(
    (code) => {
      client.close();
      process.exitCode = code;
    },
    (err: unknown) => {
      client.close();
      const e = err as grpc.ServiceError;
      if (isUnreachable(err)) {
        process.stderr.write(
          `workloadnet: cannot reach the daemon at ${opts.socket}: ${e.details}\nIs it running? (workloadnet daemon, or systemctl status workloadnet)\n`,
        );
        process.exitCode = EXIT.unreachable;
      } else {
        process.stderr.write(`workloadnet: ${grpc.status[e.code] ?? 'ERROR'}: ${e.details ?? String(err)}\n`);
        process.exitCode = e.code === grpc.status.NOT_FOUND ? EXIT.notFound : EXIT.error;
      }
    },
  );
}

export function clientCommand(program: Command, name: string, description: string): Command {
  return program
    .command(name)
    .description(description)
    .option('--socket <path>', 'daemon API socket', process.env.WORKLOADNET_SOCKET ?? DEFAULT_CONFIG.socket)
    .option('--timeout <seconds>', 'give up after this long', '30');
}

export function registerClientCommands(program: Command): void {
  clientCommand(program, 'status', 'show whether the node can attach workloads, and why not')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExit code 3 when the daemon is not ready.\nExample:\n  workloadnet status --json | jq .ready',
    )
    .action((opts: GlobalOpts) =>
      withClient(opts, async (c) => {
        // The text counts the peers; only --json prints their rows (thousands in a large cluster).
        const st = await c.status({ omitFabricPeers: !opts.json });
        process.stdout.write(opts.json ? json(st) : formatStatus(st));
        return st.ready ? EXIT.ok : EXIT.notReady;
      }),
    );

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

  clientCommand(program, 'gc', 'detach every attachment except the workloads named')
    .argument('[keep...]', 'workload ids (or workload/ifname) to keep')
    .option('--all', 'allow an empty keep list, which detaches everything')
    .option(
      '--namespaces-gone',
      'instead of a keep list: run the leak sweep now (detach attachments whose namespace is gone)',
    )
    .option('--dry-run', 'with no keep list: show what the leak sweep would detach, change nothing')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  workloadnet gc $(crictl pods -q)\n  workloadnet gc --dry-run\n  workloadnet gc --namespaces-gone',
    )
    .action(
      (keep: string[], opts: GlobalOpts & { all?: boolean; namespacesGone?: boolean; dryRun?: boolean }) => {
        if (opts.dryRun || opts.namespacesGone) {
          if (keep.length > 0) {
            process.stderr.write('workloadnet: --dry-run and --namespaces-gone take no keep list\n');
            process.exitCode = EXIT.usage;
            return Promise.resolve();
          }
          return withClient(opts, async (c) => {
            const res = await c.call(c.raw.gc, {
              keep: [],
              namespacesGone: true,
              dryRun: opts.dryRun ?? false,
            });
            const names = (refs: Array<{ workloadId: string; ifName: string }>): string =>
              refs.map((r) => `${r.workloadId}/${r.ifName}`).join(' ') || '(none)';
            process.stdout.write(
              opts.json
                ? json(res)
                : `${opts.dryRun ? 'would detach' : 'detached'} (namespace gone on two sweeps): ${names(res.removed)}\n` +
                    `namespace gone, seen once (detached by the next sweep if still gone): ${names(res.suspected)}\n`,
            );
            return EXIT.ok;
          });
        }
        if (keep.length === 0 && !opts.all) {
          process.stderr.write(
            'workloadnet: gc with no workloads to keep detaches everything; pass --all if you mean it\n',
          );
          process.exitCode = EXIT.usage;
          return Promise.resolve();
        }
        return withClient(opts, async (c) => {
          const res = await c.call(c.raw.gc, {
            keep: keep.map((k) => {
              const [workloadId = '', ifName = ''] = k.split('/');
              return { workloadId, ifName };
            }),
            namespacesGone: false,
            dryRun: false,
          });
          process.stdout.write(
            opts.json
              ? json(res)
              : `removed ${res.removed.length}: ${res.removed.map((r) => `${r.workloadId}/${r.ifName}`).join(' ')}\n`,
          );
          return EXIT.ok;
        });
      },
    );

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
        'each must be in --bin-dir',
    )
    .option(
      '--force',
      'overwrite files that were not written by workloadnet, and chain plugins missing from --bin-dir',
    )
    .addHelpText(
      'after',
      `
The forwarder is dist/bin/workloadnet-cni, built by npm run build when a C compiler is present.

Examples:
  workloadnet install-cni --bin-dir /opt/cni/bin --conf-dir /etc/cni/net.d
  workloadnet install-cni --chain portmap,bandwidth     hostPort and bandwidth annotations for pods
  workloadnet install-cni --network default             the pod network of a daemon with named networks
  workloadnet install-cni --network fast                a secondary network (e.g. for Multus)`,
    )
    .action(
      async (opts: {
        binDir: string;
        confDir: string;
        cniSocket: string;
        name: string;
        network?: string;
        mtu?: string;
        force?: boolean;
        chain?: string;
      }) => {
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
        });
        process.stdout.write(`installed ${res.binary}\nwrote ${res.conflist}\n`);
      },
    );

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
      // A daemon from before peer_count gives the rows only.
      `fabric:      ${f.mode}, ${f.ready ? 'ready' : 'not ready'}, ${Math.max(f.peerCount, f.peers.length)} peers (workloadnet peers)`,
    );
    for (const r of f.reasons) lines.push(`  reason:    ${r}`);
    for (const w of f.warnings) lines.push(`  warning:   ${w}`);
  }
  if (st.reconcile) {
    const r = st.reconcile;
    lines.push(
      `reconcile:   at ${r.at}: ${r.healthy} healthy, ${r.repaired} repaired, ${r.released} released, ${r.orphansRemoved} orphans removed${r.adopted ? `, ${r.adopted} adopted` : ''}`,
    );
    for (const w of r.warnings) lines.push(`  warning:   ${w}`);
  }
  lines.push(`version:     ${st.version}`);
  return lines.join('\n') + '\n';
}
