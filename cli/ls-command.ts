import type { Command } from 'commander';
import * as grpc from '@grpc/grpc-js';
import { DEFAULT_NETWORK } from '../core/config';
import type { Attachment } from '../proto/gen/workloadnet/v1/workload';
import type { ApiClient } from './api-client';
import { EXIT, clientCommand, withClient } from './client-commands';
import { attachmentJson } from './inspect-format';
import { StreamedJsonArray, StreamedTable, age, type TextSink } from './output';

// `workloadnet ls`: every attachment, printed as the daemon streams them (ListStream), so that a node
// with tens of thousands costs neither the daemon nor this process the whole table at once. Stdout is
// the pace: while it is full the stream is paused, and HTTP/2 flow control stops the daemon reading
// pages. A daemon older than ListStream answers UNIMPLEMENTED; then the one-message List serves.

interface LsOpts {
  socket: string;
  timeout: string;
  json?: boolean;
}

const HEADERS = ['WORKLOAD', 'POD', 'INTERFACE', 'NETWORK', 'IPS', 'BACKEND', 'STATE', 'AGE'];

export function registerLsCommand(program: Command): void {
  clientCommand(program, 'ls', 'list attachments')
    .alias('list')
    .option('--json', 'print JSON (one array, written as the attachments arrive)')
    .addHelpText(
      'after',
      '\nRows are printed as the daemon sends them; the table sizes its columns by the first 256.' +
        '\n--timeout is how long the daemon may stay silent, not how long the whole listing may take.' +
        "\nExamples:\n  workloadnet ls\n  workloadnet ls --json | jq -r '.[].workloadId'",
    )
    .action((opts: LsOpts) =>
      withClient(opts, async (c) => {
        // A reader that goes away (`workloadnet ls | head`) ends the command quietly: see workloadnet.ts.
        const out = process.stdout;
        const printer = opts.json ? jsonPrinter(out) : tablePrinter(out);
        const timeoutMs = Number(opts.timeout) * 1000;
        const streamed = await streamAttachments(c, printer.add, () => drained(out), timeoutMs);
        if (streamed === 'unimplemented') {
          process.stderr.write(
            'workloadnet: the daemon has no ListStream (it is older than this client): listing with List, ' +
              'which sends every attachment in one message\n',
          );
          for (const att of (await c.call(c.raw.list, {})).attachments) printer.add(att);
        }
        printer.end();
        return EXIT.ok;
      }),
    );
}

interface Printer {
  /** False when stdout is full. */
  add: (att: Attachment) => boolean;
  end: () => void;
}

function jsonPrinter(out: TextSink): Printer {
  const array = new StreamedJsonArray(out);
  return { add: (att) => array.element(attachmentJson(att)), end: () => array.end() };
}

function tablePrinter(out: TextSink): Printer {
  const t = new StreamedTable(out, HEADERS);
  const now = Date.now();
  return {
    add: (a) =>
      t.row([
        a.workloadId,
        a.pod && (a.pod.namespace || a.pod.name) ? `${a.pod.namespace}/${a.pod.name}` : '-',
        a.ifName,
        a.network || DEFAULT_NETWORK,
        (a.result?.ips ?? []).map((i) => i.cidr).join(',') || '-',
        a.result?.backend ?? '-',
        a.state,
        age(a.createdAt, now),
      ]),
    end: () => t.end(),
  };
}

function drained(out: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => out.once('drain', resolve));
}

/**
 * Every attachment through ListStream to `add`, in List's order; 'unimplemented' when the daemon has
 * no ListStream (before any row, so nothing has been printed). While `add` says the output is full the
 * stream is paused until `drained`. `idleMs` bounds how long the daemon may send nothing, not the whole
 * listing, which a slow reader of the output may stretch as long as it likes.
 */
export function streamAttachments(
  c: ApiClient,
  add: (att: Attachment) => boolean,
  drained: () => Promise<void>,
  idleMs: number,
): Promise<'done' | 'unimplemented'> {
  return new Promise((resolve, reject) => {
    const call = c.raw.listStream({});
    let rows = 0;
    let timer: NodeJS.Timeout | undefined;
    const settle = (): void => clearTimeout(timer);
    const waitForDaemon = (): void => {
      settle();
      timer = setTimeout(() => {
        reject(silent(idleMs));
        call.cancel();
      }, idleMs);
    };
    waitForDaemon();
    call.on('data', (att: Attachment) => {
      rows++;
      if (add(att)) return waitForDaemon();
      // The daemon is not what we wait for while the output is full.
      settle();
      call.pause();
      void drained().then(() => {
        waitForDaemon();
        call.resume();
      });
    });
    call.on('error', (err: grpc.ServiceError) => {
      settle();
      if (err.code === grpc.status.UNIMPLEMENTED && rows === 0) resolve('unimplemented');
      else reject(err);
    });
    call.on('end', () => {
      settle();
      resolve('done');
    });
  });
}

/** The error of a daemon that stopped sending mid-listing, in the shape the CLI reports gRPC errors. */
function silent(idleMs: number): Error {
  const details = `the daemon sent nothing for ${idleMs / 1000} s (--timeout); the listing is incomplete`;
  return Object.assign(new Error(details), { code: grpc.status.DEADLINE_EXCEEDED, details });
}
