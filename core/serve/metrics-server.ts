import * as http from 'node:http';
import type { Lifecycle } from '../daemon/lifecycle';
import { invalidArgument } from '../errors';
import type { Metrics } from '../metrics';

// Serves /metrics for Prometheus. Off unless configured, and meant for loopback: it has no auth.
export class MetricsServer implements Lifecycle {
  readonly name = 'metrics';
  private readonly server: http.Server;

  constructor(
    private readonly listenAddr: string,
    metrics: Metrics,
  ) {
    this.server = http.createServer((req, res) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404).end('not found; try /metrics\n');
        return;
      }
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(text),
        (err: Error) => res.writeHead(500).end(err.message),
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
