// Writes this node's workloadnet.io/fabric annotation on its own Node: one write at a time (one more if
// asked meanwhile), retried with a capped backoff while it fails, and whether it is on the Node as we
// wrote it. Its own file because the write has its own life (retries, a Node that does not exist yet)
// beside the list+watch of every Node in kubernetes-peer-source.ts, which tells it what it sees.

import type { V1Node } from '@kubernetes/client-node';
import type { Logger } from '../../core/logger';
import { codeOf, describeApiError } from './api-error';
import { FABRIC_ANNOTATION } from './fabric-annotation';

export interface AnnotationPublisherOptions {
  nodeName: string;
  logger: Logger;
  /** First and largest delay before a failed write is tried again. */
  backoffMs?: { initial: number; max: number };
  /** Whether a write can be made yet (the API client exists). */
  ready: () => boolean;
  /** Patches our Node's status with the annotation; answers the Node as it is then. */
  patch: (annotation: string) => Promise<V1Node>;
  /** The API answered a write with our Node. */
  answered: (node: V1Node) => void;
  /** A write failed: the HTTP status (undefined: no answer) and the error. */
  failed: (code: number | undefined, err: unknown) => void;
}

export class AnnotationPublisher {
  /** The annotation's value as this daemon writes it. */
  annotation = '';
  /** The annotation is on our Node as we wrote it (the last patch was answered, or an event showed it). */
  published = false;
  /** Why the last write failed; empty when it did not. */
  error = '';
  private publishing = false;
  private again = false;
  private retry?: NodeJS.Timeout;
  private backoff: number;
  private stopped = false;

  constructor(private readonly opts: AnnotationPublisherOptions) {
    this.backoff = this.initialBackoff;
  }

  /** The next failed write waits the first delay again. */
  resetBackoff(): void {
    this.backoff = this.initialBackoff;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
  }

  /** Writes our annotation; one write at a time, and one more if asked meanwhile. */
  async publish(): Promise<void> {
    if (this.stopped || !this.opts.ready()) return;
    if (this.publishing) {
      this.again = true;
      return;
    }
    this.publishing = true;
    clearTimeout(this.retry);
    try {
      do {
        this.again = false;
        const node = await this.opts.patch(this.annotation);
        this.opts.answered(node);
        this.published = node.metadata?.annotations?.[FABRIC_ANNOTATION] === this.annotation;
        this.error = '';
        this.backoff = this.initialBackoff;
        if (this.published)
          this.opts.logger.info({ node: this.opts.nodeName }, 'fabric annotation published on own Node');
      } while (this.again && !this.stopped);
    } catch (err) {
      this.opts.failed(codeOf(err), err);
      this.error = describeApiError(err);
      this.opts.logger.warn({ err: this.error, retryMs: this.backoff }, 'fabric annotation not published');
      // A missing Node is written to when its ADDED event arrives, and after the backoff anyway.
      this.retry = setTimeout(() => void this.publish(), this.backoff);
      this.retry.unref();
      this.backoff = Math.min(this.backoff * 2, this.opts.backoffMs?.max ?? 30_000);
    } finally {
      this.publishing = false;
    }
  }

  private get initialBackoff(): number {
    return this.opts.backoffMs?.initial ?? 500;
  }
}
