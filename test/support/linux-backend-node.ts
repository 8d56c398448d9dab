import { LinuxBackend, type LinuxBackendOptions } from '../../backends/linux/linux-backend';
import { NetnsSet, netnsPath } from './netns';
import { suiteResource } from './suite-resource';

// The Linux backend on a test-owned node namespace (an uplink with an address and a default route),
// for all the tests of a `describe`: started before them, stopped after them with every namespace of
// the pool, which the tests add their workloads to.

export interface LinuxBackendNode {
  readonly pool: NetnsSet;
  /** The node namespace's name. */
  readonly node: string;
  readonly backend: LinuxBackend;
  /** Runs `fn` with a second backend on the same node, started with `opts` and stopped after it. */
  withAnother(
    opts: Omit<LinuxBackendOptions, 'hostNetnsPath'>,
    fn: (other: LinuxBackend) => Promise<void>,
  ): Promise<void>;
}

export interface LinuxBackendNodeOptions {
  /** The prefix of every namespace's name. */
  prefix: string;
  /** The node's uplink address. */
  address: string;
  backend?: Omit<LinuxBackendOptions, 'hostNetnsPath'>;
  /** Runs once the node exists, before the backend starts. */
  beforeStart?: (pool: NetnsSet) => Promise<void>;
}

export function linuxBackendNode(opts: LinuxBackendNodeOptions): LinuxBackendNode {
  const pool = new NetnsSet(opts.prefix);
  return suiteResource<LinuxBackendNode>(
    async () => {
      const node = pool.addNode(opts.address).name;
      await opts.beforeStart?.(pool);
      const backend = new LinuxBackend({ ...opts.backend, hostNetnsPath: netnsPath(node) });
      try {
        await backend.start();
      } catch (err) {
        pool.cleanup();
        throw err;
      }
      const withAnother = async (
        more: Omit<LinuxBackendOptions, 'hostNetnsPath'>,
        fn: (other: LinuxBackend) => Promise<void>,
      ): Promise<void> => {
        const other = new LinuxBackend({ ...more, hostNetnsPath: netnsPath(node) });
        await other.start();
        try {
          await fn(other);
        } finally {
          await other.stop();
        }
      };
      return { pool, node, backend, withAnother };
    },
    async (made) => {
      await made.backend.stop();
      pool.cleanup();
    },
  );
}
