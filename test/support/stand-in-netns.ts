import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { NetnsOpener } from '../../core/netns-opener';
import { NetnsError } from '../../lib/netns/netns-error';
import type { Netns, NetnsPresence } from '../../lib/netns/netns-handle';

// Stand-in network namespaces for API tests whose backend never enters one (the recording backend):
// each is an empty file in a scratch directory, and the core opens it through this opener instead of
// the kernel, so those suites need no root. Whether a path is a real, allowed namespace is the kernel
// opener's business, and is tested against real namespaces (core/netns.test.ts, the API's bad-input
// and restart tests, the reliability suites).

export class StandInNamespaces implements NetnsOpener {
  private dir: string | undefined;
  private made = 0;

  /** A new stand-in namespace, named and shaped like NetnsSet.add()'s. */
  add(): { name: string; path: string } {
    this.dir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'wn-stand-in-netns-'));
    const name = `ns${++this.made}`;
    const file = path.join(this.dir, name);
    fs.writeFileSync(file, '');
    return { name, path: file };
  }

  /** Opens one of this set's stand-ins; any other path is refused as the kernel opener would. */
  async openWorkload(netnsPath: string): Promise<Netns> {
    if (this.dir === undefined || path.dirname(netnsPath) !== this.dir) {
      throw new NetnsError(
        'not-a-netns',
        netnsPath,
        `${netnsPath} is not one of this test's stand-in namespaces`,
      );
    }
    let inode: number;
    try {
      inode = fs.statSync(netnsPath).ino;
    } catch {
      throw new NetnsError('missing', netnsPath, `stand-in namespace ${netnsPath} does not exist`);
    }
    let closed = false;
    return {
      path: netnsPath,
      fd: -1,
      inode,
      get closed() {
        return closed;
      },
      close: () => void (closed = true),
      enter: () => {
        throw new Error(`${netnsPath} is a stand-in namespace: there is nothing to enter`);
      },
    };
  }

  /** The host's namespace is one of the stand-ins too (the host port's test names one). */
  openHost(netnsPath: string): Promise<Netns> {
    return this.openWorkload(netnsPath);
  }

  async stillPresent(netnsPath: string, inode: number): Promise<boolean> {
    try {
      return fs.statSync(netnsPath).ino === inode;
    } catch {
      return false;
    }
  }

  async presence(netnsPath: string, inode: number): Promise<NetnsPresence> {
    return (await this.stillPresent(netnsPath, inode)) ? 'present' : 'gone';
  }

  /** Deletes every stand-in. */
  cleanup(): void {
    if (this.dir !== undefined) fs.rmSync(this.dir, { recursive: true, force: true });
    this.dir = undefined;
  }
}
