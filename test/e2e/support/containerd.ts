import { ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { cgroupDirsOf, pidsInCgroupTrees, removeCgroupTrees, unescapeMountPath } from './cgroup';
import { CriClient, PodSandboxSpec } from './cri-client';
import { run, runRaw } from './exec';
import { NETNS_DIR, netnsPath } from './netns';
import { buildPauseImage, PAUSE_IMAGE_NAME } from './pause-image';

// A real containerd (Debian's, with its built-in CRI plugin) run privately by a test: its own root,
// state, sockets and config under a temporary folder, inside a test-owned "node" network namespace so
// that pod veths, bridges and routes never touch the machine's own namespace. Tests drive it through
// CRI exactly as a kubelet would, and it calls the CNI plugins found in `cniBinDir` exactly as on a node.

export interface ContainerdHarnessOptions {
  /** Folder containerd executes CNI plugins from (the test puts the plugins there). */
  cniBinDir: string;
  /** Folder containerd reads the CNI conflist from (max_conf_num = 1: the first one by name wins). */
  cniConfDir: string;
  /** A test-owned network namespace name (from `ip netns add`) that containerd runs in. */
  nodeNetns: string;
  /** Parent folder of the harness' temporary folder (default: the OS temp dir). Keep it short: unix socket paths are limited to 107 bytes. */
  root?: string;
  /** Snapshotter for the CRI plugin and for the image import (default overlayfs). */
  snapshotter?: 'overlayfs' | 'native';
  /** Where the pause image tar is cached between runs (default: see pause-image.ts). */
  imageCacheDir?: string;
  /** How long to wait for containerd to answer on its socket (default 30 s). */
  startTimeoutMs?: number;
}

/** Binaries containerd is given on a clean PATH: it passes its whole environment on to CNI plugins. */
const CLEAN_ENV = {
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: '/root',
};

const CONTAINERD = '/usr/bin/containerd';
const CTR = '/usr/bin/ctr';
const RUNC = '/usr/sbin/runc';
const CRI_NAMESPACE = 'k8s.io';
/** containerd puts shim sockets here whatever its config says. */
const SHIM_SOCKET_DIR = '/run/containerd/s';
/** libcni's result cache, shared by every runtime on the machine. */
const CNI_RESULT_CACHE = '/var/lib/cni/results';

export class ContainerdHarness {
  /** containerd's gRPC socket (CRI and containerd API). */
  readonly socketPath: string;
  /** CRI client connected to `socketPath`. */
  readonly cri: CriClient;
  /** containerd's stdout+stderr. Kept after stop() when a pod failed to stop or WORKLOADNET_E2E_KEEP_LOGS is set. */
  readonly logPath: string;
  /**
   * Cgroup parent to give every pod (PodSandboxSpec.cgroupParent). Relative on purpose: runc nests it
   * under its own cgroup, i.e. under this test process' cgroup (see cgroup.ts).
   */
  readonly cgroupParent: string;

  private stopped = false;
  private exitCode: number | null | undefined;
  private readonly exited: Promise<void>;

  private constructor(
    /** The harness' temporary folder: containerd's root, state, config, sockets. */
    readonly dir: string,
    readonly options: Required<Pick<ContainerdHarnessOptions, 'nodeNetns' | 'snapshotter'>>,
    private readonly daemon: ChildProcess,
    logPath: string,
    cgroupParent: string,
  ) {
    this.socketPath = path.join(dir, 'containerd.sock');
    this.logPath = logPath;
    this.cgroupParent = cgroupParent;
    this.cri = CriClient.connect(this.socketPath);
    this.exited = new Promise((resolve) => {
      daemon.once('exit', (code, signal) => {
        this.exitCode = code ?? (signal ? -1 : null);
        resolve();
      });
      // nsenter itself could not be started: there will be no 'exit'.
      daemon.once('error', () => {
        this.exitCode ??= -1;
        resolve();
      });
    });
  }

  /** The pid of the containerd process. */
  get pid(): number {
    if (this.daemon.pid === undefined) throw new Error('containerd has no pid');
    return this.daemon.pid;
  }

  /**
   * Writes the config, starts containerd inside the node namespace, waits for its socket and imports
   * the pause image. On any failure everything started so far is stopped and removed again.
   */
  static async start(opts: ContainerdHarnessOptions): Promise<ContainerdHarness> {
    const nodeNetnsPath = netnsPath(opts.nodeNetns);
    if (!existsSync(nodeNetnsPath)) {
      throw new Error(`node namespace ${opts.nodeNetns} does not exist: create it with addNetns() first`);
    }
    // The CRI stream server binds 127.0.0.1 inside the node namespace, which needs loopback up.
    await run('ip', ['-n', opts.nodeNetns, 'link', 'set', 'lo', 'up']);
    const snapshotter = opts.snapshotter ?? 'overlayfs';
    const image = await buildPauseImage(opts.imageCacheDir);

    const parent = opts.root ?? os.tmpdir();
    await mkdir(parent, { recursive: true });
    const dir = await mkdtemp(path.join(parent, 'wne-ctrd-'));
    const logPath = `${dir}.log`;
    const cgroupParent = `workloadnet-e2e-${randomBytes(4).toString('hex')}`;
    await writeFile(path.join(dir, 'config.toml'), containerdConfig(dir, opts, snapshotter));

    const logFd = openSync(logPath, 'a');
    let daemon: ChildProcess;
    try {
      // nsenter (not `ip netns exec`) so that containerd shares our mount namespace: the overlay
      // rootfs and /var/run/netns/cni-… mounts it makes must be visible to the test and to cleanup.
      // nsenter execs containerd directly, so the child's pid is containerd's.
      daemon = spawn(
        'nsenter',
        [`--net=${nodeNetnsPath}`, CONTAINERD, '--config', path.join(dir, 'config.toml')],
        { env: CLEAN_ENV, stdio: ['ignore', logFd, logFd] },
      );
    } finally {
      closeSync(logFd);
    }
    daemon.unref();

    const harness = new ContainerdHarness(
      dir,
      { nodeNetns: opts.nodeNetns, snapshotter },
      daemon,
      logPath,
      cgroupParent,
    );
    try {
      await harness.waitUntilServing(opts.startTimeoutMs ?? 30_000);
      await run(CTR, [
        '-a',
        harness.socketPath,
        '-n',
        CRI_NAMESPACE,
        'images',
        'import',
        '--snapshotter',
        snapshotter,
        image,
      ]);
    } catch (err) {
      const tail = harness.logTail(30);
      await harness.stop().catch(() => undefined);
      const reason = err instanceof Error ? err.message : String(err);
      throw new Error(`containerd did not start: ${reason}\n--- containerd log ---\n${tail}`, { cause: err });
    }
    return harness;
  }

  /** A pod config with a fresh uid, namespace "default" and this harness' cgroup parent. */
  podSpec(name: string, extra: Partial<PodSandboxSpec> = {}): PodSandboxSpec {
    return { name, uid: randomUUID(), namespace: 'default', cgroupParent: this.cgroupParent, ...extra };
  }

  /**
   * Waits until containerd reports NetworkReady, i.e. it has loaded a valid conflist from cniConfDir
   * (it watches the folder; RunPodSandbox fails before that).
   */
  async waitForNetworkReady(timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    for (;;) {
      const { conditions } = await this.cri.status();
      const network = conditions.find((c) => c.type === 'NetworkReady');
      if (network?.status) return;
      last = network ? `${network.reason}: ${network.message}` : 'no NetworkReady condition';
      if (Date.now() > deadline)
        throw new Error(`containerd network not ready after ${timeoutMs} ms (${last})`);
      await delay(100);
    }
  }

  /** The last lines of containerd's log, for failure messages. */
  logTail(lines = 50): string {
    try {
      return readFileSync(this.logPath, 'utf8')
        .split('\n')
        .slice(-lines - 1)
        .join('\n');
    } catch {
      return '(no log)';
    }
  }

  /**
   * Stops and removes every pod sandbox (all of them are the test's: this containerd is private),
   * stops containerd, then removes whatever a crash or failed stop left behind that is provably this
   * harness': shims started for its socket, processes in its cgroup, pod netns files whose namespace is
   * held by those processes or that its pods reported, mounts under its folder, shim sockets and CNI
   * result-cache entries of its sandboxes; finally its folder. Throws, after cleaning up, when a pod
   * could not be stopped or removed through CRI (that usually means a CNI DEL failed).
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    const problems: string[] = [];
    const sandboxIds = new Set<string>();
    const podNetnsPaths = new Set<string>();

    if (this.exitCode === undefined) {
      try {
        for (const pod of await this.cri.listPodSandboxes({ timeoutMs: 10_000 })) {
          sandboxIds.add(pod.id);
          try {
            const status = await this.cri.podSandboxStatus(pod.id, { timeoutMs: 10_000 });
            if (status.netnsPath) podNetnsPaths.add(status.netnsPath);
            await this.cri.stopPodSandbox(pod.id);
            await this.cri.removePodSandbox(pod.id);
          } catch (err) {
            problems.push(`pod ${pod.name} (${pod.id}): ${(err as Error).message}`);
          }
        }
      } catch (err) {
        problems.push(`listing pods: ${(err as Error).message}`);
      }
    } else {
      problems.push(`containerd had already exited (code ${String(this.exitCode)})`);
    }
    this.cri.close();

    await this.stopDaemon();

    // Shims survive containerd by design; they carry our socket path on their command line.
    for (const shim of await shimsServing(this.socketPath)) {
      sandboxIds.add(shim.id);
      killQuietly(shim.pid);
    }

    const cgroupDirs = await cgroupDirsOf(this.cgroupParent, process.pid);
    const leftoverPids = await pidsInCgroupTrees(cgroupDirs);
    const heldNetns = await netnsIdentities(leftoverPids);
    for (const pid of leftoverPids) killQuietly(pid);
    await waitForExit(leftoverPids, 5_000);
    const busyCgroups = await removeCgroupTrees(cgroupDirs);
    if (busyCgroups.length > 0) problems.push(`cgroups not removed: ${busyCgroups.join(', ')}`);

    for (const file of await podNetnsFilesToRemove(podNetnsPaths, heldNetns)) {
      await runRaw('umount', [file]);
      await unlink(file).catch(() => undefined);
    }
    await unmountAllUnder(this.dir);

    for (const id of sandboxIds) {
      await rm(shimSocketPath(this.socketPath, id), { force: true });
      await removeCniCacheEntries(id);
    }
    await rm(this.dir, { recursive: true, force: true });
    if (problems.length === 0 && !process.env['WORKLOADNET_E2E_KEEP_LOGS']) {
      await rm(this.logPath, { force: true });
    }
    if (problems.length > 0) {
      throw new Error(`containerd harness stop: ${problems.join('; ')} (log: ${this.logPath})`);
    }
  }

  private async waitUntilServing(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = 'socket not created yet';
    for (;;) {
      if (this.exitCode !== undefined)
        throw new Error(`containerd exited with code ${String(this.exitCode)}`);
      if (existsSync(this.socketPath)) {
        try {
          await this.cri.version({ timeoutMs: 2_000 });
          return;
        } catch (err) {
          last = (err as Error).message;
        }
      }
      if (Date.now() > deadline) throw new Error(`containerd not serving after ${timeoutMs} ms: ${last}`);
      await delay(50);
    }
  }

  private async stopDaemon(): Promise<void> {
    if (this.exitCode !== undefined) return;
    this.daemon.kill('SIGTERM');
    const gone = await Promise.race([this.exited.then(() => true), delay(10_000).then(() => false)]);
    if (!gone) {
      this.daemon.kill('SIGKILL');
      await this.exited;
    }
  }
}

function containerdConfig(dir: string, opts: ContainerdHarnessOptions, snapshotter: string): string {
  const q = (s: string): string => JSON.stringify(s); // JSON string escapes are valid TOML basic strings.
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return `version = 2
root = ${q(path.join(dir, 'root'))}
state = ${q(path.join(dir, 'state'))}
oom_score = 0
# Snapshotters that cannot work here; disabling them keeps the log free of their probing.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = ${q(path.join(dir, 'containerd.sock'))}

[ttrpc]
  address = ${q(path.join(dir, 'containerd.sock.ttrpc'))}

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(path.join(dir, 'opt'))}

[${cri}]
  sandbox_image = ${q(PAUSE_IMAGE_NAME)}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  # Without this runc fails ("can't get final child's PID from pipe: EOF"): the machine does not give
  # us CAP_SYS_RESOURCE, so the OOM score may only be raised, never lowered.
  restrict_oom_score_adj = true

[${cri}.containerd]
  snapshotter = ${q(snapshotter)}
  default_runtime_name = "runc"

[${cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[${cri}.containerd.runtimes.runc.options]
  BinaryName = ${q(RUNC)}
  Root = ${q(path.join(dir, 'runc'))}
  # No systemd here (cgroup v1, cgroupfs driver).
  SystemdCgroup = false

[${cri}.cni]
  bin_dir = ${q(opts.cniBinDir)}
  conf_dir = ${q(opts.cniConfDir)}
  max_conf_num = 1
`;
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

async function waitForExit(pids: readonly number[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const states = await Promise.all(pids.map(processState));
    // A zombie has already left its cgroup and namespaces; only its parent's reaping is missing.
    if (states.every((state) => state === undefined || state === 'Z')) return;
    await delay(20);
  }
}

/** The state letter from /proc/<pid>/stat (R, S, Z, …), or undefined once the process is gone. */
async function processState(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // "pid (comm) S …": comm may contain spaces and parentheses, so look after the last ')'.
  return stat?.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

/** Shim processes started by the containerd at `socketPath`, with the sandbox id each serves. */
async function shimsServing(socketPath: string): Promise<{ pid: number; id: string }[]> {
  const found: { pid: number; id: string }[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).split('\0');
    } catch {
      continue;
    }
    if (!(argv[0] ?? '').endsWith('containerd-shim-runc-v2')) continue;
    const address = argv[argv.indexOf('-address') + 1];
    const id = argv[argv.indexOf('-id') + 1];
    if (address === socketPath && id) found.push({ pid: Number(entry), id });
  }
  return found;
}

/** The shim socket containerd 1.6 derives for a sandbox: sha256 of "<grpc address>/<namespace>/<id>". */
function shimSocketPath(socketPath: string, id: string): string {
  const digest = createHash('sha256')
    .update(path.join(socketPath, CRI_NAMESPACE, id))
    .digest('hex');
  return path.join(SHIM_SOCKET_DIR, digest);
}

/** "dev:ino" of each process' network namespace. */
async function netnsIdentities(pids: readonly number[]): Promise<Set<string>> {
  const ids = new Set<string>();
  for (const pid of pids) {
    try {
      const st = await stat(`/proc/${pid}/ns/net`);
      ids.add(`${st.dev}:${st.ino}`);
    } catch {
      // The process is gone; its namespace file (if any) is matched by path instead.
    }
  }
  return ids;
}

/**
 * The cni-… netns files still present that belong to this harness: reported by its pods, or binding a
 * namespace that one of its leftover processes is in.
 */
async function podNetnsFilesToRemove(reported: Set<string>, held: Set<string>): Promise<string[]> {
  const files: string[] = [];
  for (const name of await readdir(NETNS_DIR).catch(() => [] as string[])) {
    if (!name.startsWith('cni-')) continue;
    const file = path.join(NETNS_DIR, name);
    let mine = reported.has(file);
    if (!mine && held.size > 0) {
      const st = await stat(file).catch(() => undefined);
      mine = st !== undefined && held.has(`${st.dev}:${st.ino}`);
    }
    if (mine) files.push(file);
  }
  return files;
}

/** Unmounts (lazily, deepest first) every mount point below `dir`, such as leftover pod rootfs overlays. */
async function unmountAllUnder(dir: string): Promise<void> {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const mountPoints = (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .map((line) => unescapeMountPath(line.split(' ')[4] ?? ''))
    .filter((mp) => mp.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
  for (const mp of mountPoints) await runRaw('umount', ['-l', mp]);
}

async function removeCniCacheEntries(sandboxId: string): Promise<void> {
  // libcni names cache files "<network name>-<container id>-<ifname>".
  for (const name of await readdir(CNI_RESULT_CACHE).catch(() => [] as string[])) {
    if (name.includes(`-${sandboxId}-`)) await rm(path.join(CNI_RESULT_CACHE, name), { force: true });
  }
}
