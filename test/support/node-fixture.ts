import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DaemonProcess, type DaemonProcessOptions } from './daemon-process';
import { addNodeUplink, NetnsSet } from './netns';

// A node for tests of the real daemon: a temp directory, a test-owned namespace shaped like a node's
// (see addNodeUplink) for the daemon to run in, the namespaces the test adds for its workloads, and the
// daemon it starts there. One cleanup removes all of it, so a suite that fails half-way leaks nothing.

export interface NodeFixtureOptions {
  /** Prefix of the namespaces' names and of the temp directory's (it names the test's area). */
  prefix: string;
  /** Prefix of the temp directory's name when it differs from `prefix`. */
  dirPrefix?: string;
  /** An address for the node's uplink (a /32 on it). */
  uplinkAddress?: string;
  /**
   * What the node namespace gets: an uplink with a default route (default), only lo up, or nothing
   * (a bare namespace, as some benchmarks measure).
   */
  shape?: 'uplink' | 'loopback' | 'bare';
  /** How cleanup stops the daemon: SIGTERM (a graceful shutdown) unless told. */
  stopSignal?: NodeJS.Signals;
}

export class NodeFixture {
  readonly namespaces: NetnsSet;
  /** The daemon `startDaemon` started last; cleanup stops it. */
  daemon: DaemonProcess | undefined;
  private made: { dir: string; node: string } | undefined;

  constructor(private readonly opts: NodeFixtureOptions) {
    this.namespaces = new NetnsSet(opts.prefix);
  }

  /** The temp directory (daemon sockets, state and log by default). */
  get dir(): string {
    return this.setUpFirst().dir;
  }
  /** The node namespace's name: the daemon runs in it. */
  get node(): string {
    return this.setUpFirst().node;
  }

  /** Makes the temp directory and the node namespace. */
  setUp(): void {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), this.opts.dirPrefix ?? this.opts.prefix));
    const node = this.namespaces.add().name;
    const shape = this.opts.shape ?? 'uplink';
    if (shape === 'loopback') execFileSync('ip', ['-n', node, 'link', 'set', 'lo', 'up']);
    else if (shape === 'uplink') addNodeUplink(node, this.opts.uplinkAddress);
    this.made = { dir, node };
  }

  /** Starts the real daemon in the node namespace, with its files in the temp directory unless told. */
  async startDaemon(opts: Partial<DaemonProcessOptions> = {}): Promise<DaemonProcess> {
    this.daemon = await DaemonProcess.start({ dir: this.dir, netns: this.node, ...opts });
    return this.daemon;
  }

  /** Stops the daemon, deletes every namespace and the temp directory; safe to call more than once. */
  async cleanup(): Promise<void> {
    await this.daemon?.kill(this.opts.stopSignal ?? 'SIGTERM').catch(() => undefined);
    this.namespaces.cleanup();
    // A process the test stops after this (a simulator writing its state file as its session ends) may
    // still add a file while the directory goes: retried, rather than failing the suite's clean-up.
    if (this.made)
      fs.rmSync(this.made.dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    this.made = undefined;
  }

  private setUpFirst(): { dir: string; node: string } {
    if (!this.made) throw new Error('NodeFixture: setUp() has not run');
    return this.made;
  }
}

/** A NodeFixture set up before the enclosing describe's tests and cleaned up after them. */
export function useNodeFixture(opts: NodeFixtureOptions): NodeFixture {
  const fixture = new NodeFixture(opts);
  before(() => fixture.setUp());
  after(() => fixture.cleanup());
  return fixture;
}
