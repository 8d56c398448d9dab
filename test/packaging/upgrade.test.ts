import { expect } from 'chai';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ApiClient } from '../../cli/api-client';
import { SCHEMA_VERSION } from '../../core/store/store-schema';
import { runShim } from '../support/cni-harness';
import { CLI, type DaemonProcess } from '../support/daemon-process';
import { linuxHostLinks } from '../support/kernel-view';
import { isRoot } from '../support/netns';
import { useNodeFixture } from '../support/node-fixture';
import { pings } from '../support/ping';
import { setStoreSchemaVersion } from '../support/store-schema';
import { waitUntil } from '../support/wait-until';

// An upgrade in place, as the DaemonSet's rolling update or `systemctl restart` after a package update
// does it: a daemon built from an earlier commit runs with attachments (Linux backend, in a test-owned
// node namespace), is stopped, and this build starts on the same state directory and sockets. Every
// attachment is kept (same addresses, same host links, none removed as an orphan, none added), traffic
// between the pods and to the node flows, and Detach works on what the old daemon attached. The earlier
// commit is the last one whose store has schema 1, so the upgrade also migrates the store. Then the
// other direction: a rollback puts the previous release back on the store this build wrote, and it
// keeps every attachment; a store of a newer schema that says this build cannot read it (its minimum
// reader) is refused at start, in words, and the refusal changes nothing.

const ROOT = path.resolve(__dirname, '..', '..', '..');
/** The last commit with store schema 1 (the next one, 80a6a3b, introduced schema 2). */
const FROM = process.env.WORKLOADNET_UPGRADE_FROM ?? '391a9c6b19382ade587e6bc356e01ac027cbf809';
/**
 * The release before the one that started naming a store's minimum reader: the build a rollback puts
 * back on this build's store (`kubectl rollout undo`).
 */
const ROLLBACK_TO = process.env.WORKLOADNET_ROLLBACK_TO ?? '2007ac3be6c353bc10b06f851100df6d6a017007';

const hasCommit = ((): boolean => {
  try {
    for (const c of [FROM, ROLLBACK_TO])
      execFileSync('git', ['-C', ROOT, 'cat-file', '-e', `${c}^{commit}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const why = !isRoot
  ? ' (skipped: needs root)'
  : !hasCommit
    ? ` (skipped: commit ${FROM.slice(0, 12)} or ${ROLLBACK_TO.slice(0, 12)} is not in this clone; a shallow clone has no history)`
    : '';
const describeIf = why === '' ? describe : describe.skip;

interface Pod {
  id: string;
  name: string;
  path: string;
  ip: string;
  hostLink: string;
}

const run = (file: string, args: string[], opts: { cwd?: string; timeout?: number } = {}) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(file, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    ),
  );

describeIf(
  `Upgrade in place from an earlier build (commit ${FROM.slice(0, 7)}, store schema 1)${why}`,
  function () {
    this.timeout(10 * 60_000);
    const fx = useNodeFixture({ prefix: 'wn-upg-', uplinkAddress: '10.250.33.1' });
    const shim = path.join(ROOT, 'dist', 'bin', 'workloadnet-cni');
    let oldTree: string;
    let rollbackTree: string;
    let old: ChildProcess | undefined;
    let current: DaemonProcess | undefined;
    const pods: Pod[] = [];

    const dir = (): string => path.join(fx.dir, 'node');
    const flags = () => ({
      socket: path.join(dir(), 'api.sock'),
      'cni-socket': path.join(dir(), 'cni.sock'),
      'state-dir': path.join(dir(), 'state'),
      'pod-cidr': '10.251.33.0/24',
    });
    const cni = (command: 'ADD' | 'DEL', pod: { id: string; path: string }) =>
      runShim(
        shim,
        {
          CNI_COMMAND: command,
          CNI_CONTAINERID: pod.id,
          CNI_NETNS: pod.path,
          CNI_IFNAME: 'eth0',
          CNI_PATH: path.dirname(shim),
        },
        JSON.stringify({
          cniVersion: '1.0.0',
          name: 'wn-upgrade',
          type: 'workloadnet',
          socket: flags()['cni-socket'],
        }),
      );
    const status = async () => {
      const c = new ApiClient(flags().socket, 10_000);
      try {
        return await c.status();
      } finally {
        c.close();
      }
    };
    const list = async () => {
      const c = new ApiClient(flags().socket, 10_000);
      try {
        return (await c.call(c.raw.list, {})).attachments;
      } finally {
        c.close();
      }
    };

    /**
     * An earlier build: its tree from git (no worktree: nothing is registered in the repository), this
     * checkout's node_modules (its dependencies are a subset at the same versions), and tsc.
     */
    const buildTree = async (commit: string, name: string): Promise<string> => {
      const tree = path.join(fx.dir, name);
      fs.mkdirSync(tree);
      execFileSync('sh', ['-c', `git -C "${ROOT}" archive ${commit} | tar -x -C "${tree}"`]);
      fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
      const tsc = await run(
        process.execPath,
        [path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'],
        { cwd: tree, timeout: 5 * 60_000 },
      );
      if (!fs.existsSync(path.join(tree, 'dist', 'cli', 'workloadnet.js'))) {
        throw new Error(`building ${commit} failed:\n${tsc.stdout}${tsc.stderr}`);
      }
      return tree;
    };
    /** Runs an earlier build's daemon on the node's state and sockets, logging to `log` in the state's folder. */
    const startEarlier = (tree: string, log: string): ChildProcess => {
      const fd = fs.openSync(path.join(dir(), log), 'a');
      const args = Object.entries(flags()).flatMap(([k, v]) => [`--${k}`, v]);
      const child = spawn(
        'ip',
        [
          'netns',
          'exec',
          fx.node,
          process.execPath,
          path.join(tree, 'dist', 'cli', 'workloadnet.js'),
          'daemon',
          ...args,
        ],
        { stdio: ['ignore', fd, fd] },
      );
      fs.closeSync(fd);
      return child;
    };
    const stopEarlier = async (child: ChildProcess | undefined): Promise<number | null | undefined> => {
      child?.kill('SIGTERM');
      await new Promise<void>((resolve) =>
        child?.exitCode !== null ? resolve() : child.once('exit', () => resolve()),
      );
      return child?.exitCode;
    };

    before(async function () {
      oldTree = await buildTree(FROM, 'old');
      rollbackTree = await buildTree(ROLLBACK_TO, 'rollback');
      fs.mkdirSync(dir(), { recursive: true });
    });

    after(async () => {
      old?.kill('SIGKILL');
      await current?.kill('SIGKILL').catch(() => undefined);
    });

    afterEach(function () {
      if (this.currentTest?.state === 'failed') {
        for (const f of ['old.log', 'daemon.log']) {
          const file = path.join(dir(), f);
          if (fs.existsSync(file))
            console.error(`--- ${f} ---\n${fs.readFileSync(file, 'utf8').split('\n').slice(-40).join('\n')}`);
        }
      }
    });

    it('the earlier daemon runs with attachments whose traffic flows', async () => {
      old = startEarlier(oldTree, 'old.log');
      await waitUntil(async () => (await status()).ready, 'the earlier daemon to be ready', 60_000, {
        retryOnError: true,
        intervalMs: 200,
      });
      expect((await status()).version).to.not.equal('');
      for (const id of ['upg-a', 'upg-b']) {
        const ns = fx.namespaces.add();
        const add = await cni('ADD', { id, path: ns.path });
        expect(add.exitCode, add.stdout + add.stderr).to.equal(0);
        const res = JSON.parse(add.stdout) as {
          ips: Array<{ address: string }>;
          interfaces: Array<{ name: string; sandbox?: string }>;
        };
        pods.push({
          id,
          ...ns,
          ip: res.ips[0]?.address.split('/')[0] ?? '',
          hostLink: res.interfaces.find((i) => i.sandbox === undefined)?.name ?? '',
        });
      }
      const [a, b] = pods as [Pod, Pod];
      expect(await pings(a.name, b.ip, { count: 3 })).to.equal(true);
      expect(await pings(fx.node, a.ip, { count: 3 })).to.equal(true);
    });

    it('this build takes over the same state and sockets: every attachment kept, migrated, no orphan', async () => {
      const before = (await linuxHostLinks(fx.node)).map((l) => l.ifname).sort();
      expect(before).to.deep.equal(pods.map((p) => p.hostLink).sort());
      expect(await stopEarlier(old), 'the earlier daemon drained and exited 0').to.equal(0);

      current = await fx.startDaemon({ dir: dir(), flags: flags() });
      await waitUntil(async () => (await status()).ready, 'this build to be ready', 60_000, {
        intervalMs: 200,
      });
      const st = await status();
      expect(st.reconcile).to.deep.include({ orphansRemoved: 0, released: 0, repaired: 0 });
      expect(st.reconcile?.healthy).to.equal(2);
      const rows = await list();
      expect(rows.map((r) => [r.workloadId, r.result?.ips[0]?.cidr ?? ''].join(' ')).sort()).to.deep.equal(
        pods.map((p) => `${p.id} ${p.ip}/32`).sort(),
      );
      // The kernel: the same host links, nothing removed, nothing added.
      expect((await linuxHostLinks(fx.node)).map((l) => l.ifname).sort()).to.deep.equal(before);
      // The store says so as well: no drift between record and dataplane.
      const c = new ApiClient(flags().socket, 10_000);
      try {
        for (const r of rows) {
          const check = await c.call(c.raw.check, { workloadId: r.workloadId, ifName: r.ifName });
          expect(check.ok, JSON.stringify(check.drift)).to.equal(true);
        }
      } finally {
        c.close();
      }
    });

    it('keeps their traffic flowing, pod to pod and node to pod', async () => {
      const [a, b] = pods as [Pod, Pod];
      expect(await pings(a.name, b.ip, { count: 3 })).to.equal(true);
      expect(await pings(b.name, a.ip, { count: 3 })).to.equal(true);
      expect(await pings(fx.node, b.ip, { count: 3 })).to.equal(true);
    });

    it(`rolls back: the previous release (${ROLLBACK_TO.slice(0, 7)}) runs on this build's store, every attachment kept`, async () => {
      const before = (await linuxHostLinks(fx.node)).map((l) => l.ifname).sort();
      await current?.stop();
      current = undefined;
      old = startEarlier(rollbackTree, 'rollback.log');
      await waitUntil(async () => (await status()).ready, 'the previous release to be ready', 60_000, {
        retryOnError: true,
        intervalMs: 200,
      });
      const st = await status();
      expect(st.reconcile).to.deep.include({ orphansRemoved: 0, released: 0, repaired: 0 });
      const rows = await list();
      expect(rows.map((r) => [r.workloadId, r.result?.ips[0]?.cidr ?? ''].join(' ')).sort()).to.deep.equal(
        pods.map((p) => `${p.id} ${p.ip}/32`).sort(),
      );
      expect((await linuxHostLinks(fx.node)).map((l) => l.ifname).sort()).to.deep.equal(before);
      const [a, b] = pods as [Pod, Pod];
      expect(await pings(a.name, b.ip, { count: 3 })).to.equal(true);
      expect(await stopEarlier(old), 'the previous release drained and exited 0').to.equal(0);
      old = undefined;
    });

    it('refuses, in words, a store of a newer schema that says this build cannot read it, and changes nothing', async () => {
      await current?.stop();
      current = undefined;
      const stateDir = flags()['state-dir'];
      await setStoreSchemaVersion(stateDir, SCHEMA_VERSION + 1, SCHEMA_VERSION + 1);
      const linksBefore = (await linuxHostLinks(fx.node)).map((l) => l.ifname).sort();
      const args = Object.entries(flags()).flatMap(([k, v]) => [`--${k}`, v]);
      const refused = await run('ip', ['netns', 'exec', fx.node, process.execPath, CLI, 'daemon', ...args], {
        timeout: 60_000,
      });
      expect(refused.code).to.equal(1);
      expect(refused.stderr).to.include(
        `written by a newer workloadnet (schema ${SCHEMA_VERSION + 1}, this build understands up to ${SCHEMA_VERSION}, and the store needs at least ${SCHEMA_VERSION + 1})`,
      );
      expect(refused.stderr).to.match(/downgrading is not supported/);
      expect((await linuxHostLinks(fx.node)).map((l) => l.ifname).sort()).to.deep.equal(linksBefore);
      const [a, b] = pods as [Pod, Pod];
      expect(await pings(a.name, b.ip, { count: 3 })).to.equal(true);
      // The store still says what it said: the refusal wrote nothing.
      const check = await run(process.execPath, [CLI, 'store', 'check', '--state-dir', stateDir], {
        timeout: 60_000,
      });
      expect(check.stdout + check.stderr).to.include(`schema ${SCHEMA_VERSION + 1}`);
    });

    it('detaches what the earlier daemon attached, leaving nothing', async () => {
      await setStoreSchemaVersion(flags()['state-dir'], SCHEMA_VERSION);
      current = await fx.startDaemon({ dir: dir(), flags: flags() });
      for (const p of pods) {
        const del = await cni('DEL', p);
        expect(del.exitCode, del.stdout + del.stderr).to.equal(0);
      }
      expect(await list()).to.deep.equal([]);
      expect(await linuxHostLinks(fx.node)).to.deep.equal([]);
    });
  },
);
