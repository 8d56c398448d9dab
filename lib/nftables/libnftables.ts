// libnftables, bound through koffi: nft's own parser and evaluator in this process, without spawning
// nft(8) for every change (a spawn costs ~15 ms here, three times a whole attach).
//
// A context talks to the kernel over the netfilter netlink socket that nft_ctx_new(3) opens, and a
// socket belongs to the network namespace of the thread that created it. So a context is made inside
// its namespace (Netns.enter: setns, create, setns back, all synchronous on the main thread) and from
// then on acts there whatever thread runs its commands. Commands run through koffi's asynchronous call
// on a libuv threadpool thread, so the event loop never waits for the kernel; one context is not safe
// for concurrent use, so its commands run one at a time, in order.
//
// Only interface *names* are used in our rules (iifname, oifname): `iif`/`oif` would make nft look the
// index up over a fresh rtnetlink socket, opened in the namespace of whichever thread runs the command.

import * as koffi from 'koffi';
import type { Netns } from '../netns/netns-handle';

/** nft_ctx_output_set_flags's NFT_CTX_OUTPUT_* (libnftables.h). */
const OUTPUT_HANDLE = 1 << 3;
const OUTPUT_JSON = 1 << 4;
const OUTPUT_TERSE = 1 << 11;
const NFT_CTX_DEFAULT = 0;
const LIBRARY = 'libnftables.so.1';

/** libnftables is missing, or a command failed: the error nft printed, in its words. */
export class NftablesError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NftablesError';
  }
}

type AsyncRun = (ctx: unknown, script: string, done: (err: unknown, rc: number) => void) => void;

interface Bindings {
  ctxNew: koffi.KoffiFunction;
  bufferOutput: koffi.KoffiFunction;
  bufferError: koffi.KoffiFunction;
  setFlags: koffi.KoffiFunction;
  run: koffi.KoffiFunction;
  output: koffi.KoffiFunction;
  error: koffi.KoffiFunction;
  free: koffi.KoffiFunction;
}

let bindings: Bindings | undefined;

/** Loaded on first use: importing this module works on a machine without libnftables. */
function library(): Bindings {
  if (bindings) return bindings;
  let lib: koffi.IKoffiLib;
  try {
    lib = koffi.load(LIBRARY);
  } catch (err) {
    throw new NftablesError(
      `cannot load ${LIBRARY} (${(err as Error).message}); install the Debian package libnftables1 ` +
        `(it comes with nftables)`,
    );
  }
  koffi.opaque('wn_nft_ctx');
  bindings = {
    ctxNew: lib.func('wn_nft_ctx *nft_ctx_new(uint32_t flags)'),
    bufferOutput: lib.func('int nft_ctx_buffer_output(wn_nft_ctx *ctx)'),
    bufferError: lib.func('int nft_ctx_buffer_error(wn_nft_ctx *ctx)'),
    setFlags: lib.func('void nft_ctx_output_set_flags(wn_nft_ctx *ctx, unsigned int flags)'),
    run: lib.func('int nft_run_cmd_from_buffer(wn_nft_ctx *ctx, const char *buf)'),
    output: lib.func('const char *nft_ctx_get_output_buffer(wn_nft_ctx *ctx)'),
    error: lib.func('const char *nft_ctx_get_error_buffer(wn_nft_ctx *ctx)'),
    free: lib.func('void nft_ctx_free(wn_nft_ctx *ctx)'),
  };
  return bindings;
}

export interface NftRunOptions {
  /** Output in JSON (for reads); otherwise nft's text. */
  json?: boolean;
  /** With the objects' handles. */
  handles?: boolean;
  /** Without set elements. */
  terse?: boolean;
}

/** One libnftables context, bound to the namespace it was made in. */
export class NftContext {
  private queue: Promise<unknown> = Promise.resolve();
  private freed = false;

  private constructor(
    private readonly lib: Bindings,
    private readonly ctx: unknown,
  ) {}

  /** A context acting in `netns` (the calling process's own namespace when absent). */
  static open(netns?: Netns): NftContext {
    const lib = library();
    const create = (): unknown => lib.ctxNew(NFT_CTX_DEFAULT) as unknown;
    const ctx = netns ? netns.enter(create) : create();
    if (ctx === null) throw new NftablesError('nft_ctx_new failed (out of memory, or no netlink socket)');
    // Both buffers: nothing is written to the daemon's stdout or stderr, and errors come back in words.
    if (Number(lib.bufferOutput(ctx)) !== 0 || Number(lib.bufferError(ctx)) !== 0) {
      lib.free(ctx);
      throw new NftablesError('nft_ctx_buffer_output/error failed');
    }
    return new NftContext(lib, ctx);
  }

  /**
   * Runs `script` (nft's syntax, one transaction for all its commands) and resolves with what it
   * printed; rejects with nft's error message when any command fails (then none took effect).
   */
  run(script: string, opts: NftRunOptions = {}): Promise<string> {
    const next = this.queue.then(() => this.runNow(script, opts));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Frees the context once the commands queued before are done. */
  async close(): Promise<void> {
    await this.queue;
    if (this.freed) return;
    this.freed = true;
    this.lib.free(this.ctx);
  }

  private async runNow(script: string, opts: NftRunOptions): Promise<string> {
    if (this.freed) throw new NftablesError('nftables context is closed');
    const flags =
      (opts.json ? OUTPUT_JSON : 0) | (opts.handles ? OUTPUT_HANDLE : 0) | (opts.terse ? OUTPUT_TERSE : 0);
    this.lib.setFlags(this.ctx, flags);
    const rc = await new Promise<number>((resolve, reject) =>
      (this.lib.run.async as AsyncRun)(this.ctx, script, (err, n) =>
        err ? reject(toError(err)) : resolve(n),
      ),
    );
    // Reading a buffer also rewinds it, so each run's text starts afresh.
    const out = String(this.lib.output(this.ctx) ?? '');
    const errText = String(this.lib.error(this.ctx) ?? '');
    if (rc !== 0) throw new NftablesError(errText.trim() || `nft command failed (${rc})`);
    return out;
  }
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}
