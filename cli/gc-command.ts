import type { Command } from 'commander';
import { HOST_PORT_WORKLOAD_ID } from '../core/attach/host-port-row';
import type { Attachment } from '../proto/gen/workloadnet/v1/workload';
import type { ApiClient } from './api-client';
import { EXIT, clientCommand, withClient } from './client-commands';
import { json } from './output';

// `workloadnet gc`: detach every attachment except the workloads named (the keep list), or run the leak
// sweep now. --dry-run previews either without detaching anything. The API previews only the sweep;
// a keep list is previewed here, from List, with the daemon's own rule (core/reconcile/keep-list-gc.ts):
// every attachment not named, by workload id or workload/interface, except the host port, which the
// daemon never gives to a keep list.

interface GcOpts {
  socket: string;
  timeout: string;
  json?: boolean;
  all?: boolean;
  namespacesGone?: boolean;
  dryRun?: boolean;
}

interface Ref {
  workloadId: string;
  ifName: string;
}

export function registerGcCommand(program: Command): void {
  clientCommand(program, 'gc', 'detach every attachment except the workloads named')
    .argument('[keep...]', 'workload ids (or workload/ifname) to keep')
    .option('--all', 'allow an empty keep list, which detaches everything')
    .option(
      '--namespaces-gone',
      'instead of a keep list: run the leak sweep now (detach attachments whose namespace is gone)',
    )
    .option(
      '--dry-run',
      'show what would be detached, change nothing (with a keep list: what it would detach now; ' +
        'without one: what the leak sweep would detach)',
    )
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  workloadnet gc $(crictl pods -q) --dry-run\n  workloadnet gc $(crictl pods -q)\n' +
        '  workloadnet gc --dry-run\n  workloadnet gc --namespaces-gone',
    )
    .action((keep: string[], opts: GcOpts) => {
      if (opts.namespacesGone && keep.length > 0) return usage('--namespaces-gone takes no keep list');
      if (opts.namespacesGone || (opts.dryRun && keep.length === 0 && !opts.all))
        return withClient(opts, (c) => sweep(c, opts));
      if (keep.length === 0 && !opts.all)
        return usage('gc with no workloads to keep detaches everything; pass --all if you mean it');
      const refs = keep.map(parseRef);
      return withClient(opts, (c) => (opts.dryRun ? preview(c, refs, opts) : detachOthers(c, refs, opts)));
    });
}

function usage(message: string): Promise<void> {
  process.stderr.write(`workloadnet: ${message}\n`);
  process.exitCode = EXIT.usage;
  return Promise.resolve();
}

function parseRef(k: string): Ref {
  const [workloadId = '', ifName = ''] = k.split('/');
  return { workloadId, ifName };
}

const names = (refs: Ref[]): string => refs.map((r) => `${r.workloadId}/${r.ifName}`).join(' ') || '(none)';

async function sweep(c: ApiClient, opts: GcOpts): Promise<number> {
  const dryRun = opts.dryRun ?? false;
  const res = await c.call(c.raw.gc, { keep: [], namespacesGone: true, dryRun });
  process.stdout.write(
    opts.json
      ? json(res)
      : `${dryRun ? 'would detach' : 'detached'} (namespace gone on two sweeps): ${names(res.removed)}\n` +
          `namespace gone, seen once (detached by the next sweep if still gone): ${names(res.suspected)}\n`,
  );
  return EXIT.ok;
}

async function detachOthers(c: ApiClient, keep: Ref[], opts: GcOpts): Promise<number> {
  const res = await c.call(c.raw.gc, { keep, namespacesGone: false, dryRun: false });
  process.stdout.write(opts.json ? json(res) : `removed ${res.removed.length}: ${names(res.removed)}\n`);
  return EXIT.ok;
}

async function preview(c: ApiClient, keep: Ref[], opts: GcOpts): Promise<number> {
  const { attachments } = await c.call(c.raw.list, {});
  const doomed = wouldDetach(attachments, keep);
  process.stdout.write(
    opts.json
      ? json({ removed: doomed, suspected: [], dryRun: true })
      : `would detach ${doomed.length} of ${attachments.length} (nothing was detached): ${names(doomed)}\n`,
  );
  return EXIT.ok;
}

/** What a keep-list GC detaches from `attachments`: the daemon's rule, applied to what List shows. */
export function wouldDetach(attachments: Attachment[], keep: Ref[]): Ref[] {
  const whole = new Set(keep.filter((k) => !k.ifName).map((k) => k.workloadId));
  const exact = new Set(keep.filter((k) => k.ifName).map((k) => `${k.workloadId}/${k.ifName}`));
  return attachments
    .filter(
      (a) =>
        a.workloadId !== HOST_PORT_WORKLOAD_ID &&
        !whole.has(a.workloadId) &&
        !exact.has(`${a.workloadId}/${a.ifName}`),
    )
    .map((a) => ({ workloadId: a.workloadId, ifName: a.ifName }));
}
