import * as http from 'node:http';
import type { Lifecycle } from '../lifecycle';
import { invalidArgument } from '../errors';
import type { Metrics } from '../metrics';

// The daemon's HTTP listener (metricsListen): /metrics for Prometheus, and /healthz and /readyz for
// kubelet's httpGet probes, which cost the node a request instead of a Node.js start per probe. It
// has no auth and changes nothing: everything it serves is also in `workloadnet status`.

/** What Status says of the node: ready to attach workloads, or the reasons it is not. */
export interface Readiness {
  ready: boolean;
  reasons: string[];
}

export interface HealthOptions {
  /** Status' readiness. Without it, /readyz answers 503 (nothing says the node is ready). */
  readiness?: () => Promise<Readiness>;
  /** How long /healthz and /readyz wait for `readiness` (default 5 s). */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 5000;

const TEXT = { 'Content-Type': 'text/plain; charset=utf-8' };

export class MetricsServer implements Lifecycle {
  readonly name = 'metrics';
  private readonly server: http.Server;

  constructor(
    private readonly listenAddr: string,
    metrics: Metrics,
    private readonly health: HealthOptions = {},
  ) {
    this.server = http.createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0];
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { ...TEXT, Allow: 'GET, HEAD' }).end('only GET and HEAD\n');
        return;
      }
      if (path === '/metrics') {
        metrics.registry.metrics().then(
          (text) => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(text),
          (err: Error) => res.writeHead(500, TEXT).end(`${err.message}\n`),
        );
      } else if (path === '/healthz') {
        void this.healthz().then(([code, text]) => res.writeHead(code, TEXT).end(text));
      } else if (path === '/readyz') {
        void this.readyz().then(([code, text]) => res.writeHead(code, TEXT).end(text));
      } else {
        res.writeHead(404, TEXT).end('not found; try /metrics, /healthz or /readyz\n');
      }
    });
  }

  /**
   * Alive: this answer proves the event loop runs, and Status answering in time (ready or not) proves
   * the service behind the API is not wedged. Not ready is no reason to restart the daemon.
   */
  private async healthz(): Promise<[number, string]> {
    if (!this.health.readiness) return [200, 'ok\n'];
    const st = await this.askReadiness();
    return typeof st === 'string' ? [503, `${st}\n`] : [200, 'ok\n'];
  }

  /** Ready exactly when Status is: the reasons, one a line, when not. */
  private async readyz(): Promise<[number, string]> {
    if (!this.health.readiness) return [503, 'not ready: this listener was given no readiness check\n'];
    const st = await this.askReadiness();
    if (typeof st === 'string') return [503, `not ready: ${st}\n`];
    if (st.ready) return [200, 'ready\n'];
    return [503, `not ready:\n${st.reasons.map((r) => `  ${r}\n`).join('') || '  (no reason given)\n'}`];
  }

  /** Status' readiness, or in words why there is none (it failed, or did not answer in time). */
  private askReadiness(): Promise<Readiness | string> {
    const timeoutMs = this.health.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => resolve(`Status did not answer within ${timeoutMs / 1000} s`),
        timeoutMs,
      );
      (this.health.readiness as () => Promise<Readiness>)().then(
        (st) => {
          clearTimeout(timer);
          resolve(st);
        },
        (err: unknown) => {
          clearTimeout(timer);
          resolve(`Status failed: ${err instanceof Error ? err.message : String(err)}`);
        },
      );
    });
  }

  /** The bound port (useful when configured with port 0). */
  get port(): number {
    const a = this.server.address();
    return typeof a === 'object' && a ? a.port : 0;
  }

  start(): Promise<void> {
    const i = this.listenAddr.lastIndexOf(':');
    const host = this.listenAddr.slice(0, i).replace(/^\[|\]$/g, '');
    const port = Number(this.listenAddr.slice(i + 1));
    if (!host || !Number.isInteger(port))
      throw invalidArgument(`metrics address ${this.listenAddr} must be HOST:PORT`);
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => resolve());
    });
  }

  /** Stops accepting, closes idle (kept-alive) connections at once and the rest after `graceMs`. */
  stop(graceMs = 5000): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.server.closeAllConnections(), graceMs);
      timer.unref();
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      this.server.closeIdleConnections();
    });
  }
}
