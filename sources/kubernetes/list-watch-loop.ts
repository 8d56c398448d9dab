import type { KubeConfig } from '@kubernetes/client-node';
import { Watch } from '@kubernetes/client-node';
import type { Logger } from '../../core/logger';
import { codeOf, describeApiError } from './api-error';

// One kind of object kept in step with the Kubernetes API, with the Node watch's discipline
// (kubernetes-peer-source.ts): one list, then a watch from the list's resourceVersion; a watch the
// server ends is resumed from the last version seen; 410 Gone (history compacted) lists again, and
// the new list replaces everything; any other failure (the API away) is tried again after a capped
// backoff, from where it was. Losing the API never empties anything: the holder keeps the last
// state until a newer list or event says otherwise.
//
// Its own loop rather than the client library's ListWatch: that one keeps every full object it has
// seen (a Pod is several KB, and the policy source watches every pod of the cluster) only to find the
// deleted ones on a relist, which the holder's replace() does from its own small values.

/** What a list or watch hands the holder. */
export interface ListWatchHolder<T> {
  /** A full list: the kind is now exactly `items`. */
  replace(items: readonly T[]): void;
  /** An object added or changed. */
  put(obj: T): void;
  /** An object deleted. */
  remove(obj: T): void;
}

export interface ListWatchLoopOptions<T> {
  /** The kind in words, plural, for logs and Status ("Pods"). */
  what: string;
  /** The collection's path, watched with ?watch=true ("/api/v1/pods"). */
  path: string;
  kubeConfig: KubeConfig;
  /** One full list of the kind. */
  list(): Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>;
  holder: ListWatchHolder<T>;
  logger: Logger;
  backoffMs?: { initial: number; max: number };
  /** Called when the API answers after it did not, and when it stops answering. */
  onReachability?(): void;
}

/** A watch that ends sooner than this after it began is not resumed at once (a server refusing watches). */
const SHORTEST_WATCH_MS = 1000;

export class ListWatchLoop<T extends { metadata?: { resourceVersion?: string } }> {
  private resourceVersion = '';
  private lists = 0;
  private reachableNow = false;
  private error = '';
  private stopped = true;
  private retry?: NodeJS.Timeout;
  private backoff: number;
  private watchAbort?: AbortController;
  private readonly watcher: Watch;

  constructor(private readonly opts: ListWatchLoopOptions<T>) {
    this.backoff = this.initialBackoff;
    this.watcher = new Watch(opts.kubeConfig);
  }

  get what(): string {
    return this.opts.what;
  }

  /** A full list is held (the last one; the API may be away since). */
  get listed(): boolean {
    return this.lists > 0;
  }

  /** Full lists done so far (the first, and one per 410 Gone). */
  get listCount(): number {
    return this.lists;
  }

  get reachable(): boolean {
    return this.reachableNow;
  }

  /** The last failure in one line, empty while the API answers. */
  get lastError(): string {
    return this.error;
  }

  /** Lists and watches until stop(); never throws (failures are retried, and said in lastError). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.run();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    this.watchAbort?.abort();
    this.watchAbort = undefined;
  }

  private get initialBackoff(): number {
    return this.opts.backoffMs?.initial ?? 500;
  }

  private async run(): Promise<void> {
    if (this.stopped) return;
    try {
      if (!this.resourceVersion) await this.relist();
      if (this.stopped) return;
      const began = performance.now();
      let ended = false;
      const abort = await this.watcher.watch(
        this.opts.path,
        { resourceVersion: this.resourceVersion, allowWatchBookmarks: true },
        (type: string, obj: unknown) => this.event(type, obj),
        (err: unknown) => {
          ended = true;
          this.watchEnded(err, performance.now() - began);
        },
      );
      if (ended) return;
      if (this.stopped) return abort.abort();
      this.watchAbort = abort;
      this.answered();
    } catch (err) {
      this.failed(err);
    }
  }

  private async relist(): Promise<void> {
    const list = await this.opts.list();
    if (this.stopped) return;
    this.answered();
    this.resourceVersion = list.metadata?.resourceVersion ?? '';
    this.lists++;
    this.opts.logger.info({ kind: this.opts.what, items: list.items.length, lists: this.lists }, 'listed');
    this.opts.holder.replace(list.items);
  }

  private event(type: string, obj: unknown): void {
    if (this.stopped || typeof obj !== 'object' || obj === null) return;
    if (type === 'ERROR') {
      // The watch ends after it: 410 lists again, anything else resumes from the same version.
      if (codeOf(obj) === 410) this.resourceVersion = '';
      else
        this.opts.logger.warn(
          { kind: this.opts.what, err: (obj as { message?: unknown }).message },
          'watch error',
        );
      return;
    }
    const o = obj as T;
    if (type === 'ADDED' || type === 'MODIFIED') this.opts.holder.put(o);
    else if (type === 'DELETED') this.opts.holder.remove(o);
    else if (type !== 'BOOKMARK') return;
    const rv = o.metadata?.resourceVersion;
    if (rv) this.resourceVersion = rv;
  }

  private watchEnded(err: unknown, lastedMs: number): void {
    this.watchAbort = undefined;
    if (this.stopped) return;
    if (err && (codeOf(err) === 410 || (err as { statusCode?: unknown }).statusCode === 410))
      this.resourceVersion = '';
    else if (err) return this.failed(err);
    // Ended without an error: the server's watch timeout, a 410, a cut connection. Resumed at once,
    // unless it ended at once (a server that keeps ending watches is not asked again in a loop).
    if (lastedMs >= SHORTEST_WATCH_MS) return void this.run();
    this.later();
  }

  private answered(): void {
    const was = this.reachableNow;
    this.reachableNow = true;
    this.error = '';
    this.backoff = this.initialBackoff;
    if (!was) {
      this.opts.logger.info({ kind: this.opts.what }, 'Kubernetes API reachable');
      this.opts.onReachability?.();
    }
  }

  private failed(err: unknown): void {
    if (this.stopped) return;
    const was = this.reachableNow;
    this.reachableNow = false;
    this.error = describeApiError(err);
    this.opts.logger.warn(
      { kind: this.opts.what, err: this.error, retryMs: this.backoff },
      'Kubernetes list+watch failed',
    );
    if (was) this.opts.onReachability?.();
    this.later();
  }

  /** Runs again after the backoff, which doubles up to its cap until the API answers. */
  private later(): void {
    clearTimeout(this.retry);
    this.retry = setTimeout(() => void this.run(), this.backoff);
    this.retry.unref();
    this.backoff = Math.min(this.backoff * 2, this.opts.backoffMs?.max ?? 30_000);
  }
}
