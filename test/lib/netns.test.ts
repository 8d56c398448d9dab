import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { NetlinkSocket, listLinks } from '../../lib/rtnetlink';
import { openProcSysFile, readSysctl } from '../../lib/netns/sysctl';
import { asWorkloadNetError } from '../../core/errors';
import { NetnsError } from '../../lib/netns/netns-error';
import { NetnsHandle, netnsPresence, netnsStillPresent } from '../../lib/netns/netns-handle';
import { ip, netnsExec, netnsInode } from '../support/netns-fixture';
import { NetnsSet, netnsPath } from '../support/netns';

// The fs module itself (not an import's copy of its bindings), so that a test can see netns.ts call it.
const nodeFs = createRequire(__filename)('node:fs') as typeof fs;

/** How many times `fn` resolved a path through fs.open, i.e. on the threadpool. */
async function threadpoolOpens(fn: () => Promise<void>): Promise<number> {
  const real = nodeFs.open;
  let calls = 0;
  nodeFs.open = ((...args: unknown[]) => {
    calls++;
    return (real as (...a: unknown[]) => void)(...args);
  }) as typeof real;
  try {
    await fn();
  } finally {
    nodeFs.open = real;
  }
  return calls;
}

function threadNetnsInode(): number {
  return fs.statSync('/proc/thread-self/ns/net').ino;
}

async function expectRejected(
  p: Promise<unknown>,
  reason: string,
  code: string,
  text: RegExp,
): Promise<void> {
  try {
    await p;
  } catch (err) {
    expect(err).to.be.instanceOf(NetnsError);
    expect((err as NetnsError).reason).to.equal(reason);
    expect(asWorkloadNetError(err).code).to.equal(code);
    expect((err as Error).message).to.match(text);
    return;
  }
  expect.fail('expected the open to be rejected');
}

describe('network namespace handles', function () {
  this.timeout(20_000);
  const pool = new NetnsSet('wnl-');
  let ns: string;
  let sleeper: ChildProcess | undefined;
  let tmp: string;

  before(async () => {
    ns = pool.add('ns').name;
    await ip('-n', ns, 'link', 'add', 'probe0', 'type', 'veth', 'peer', 'name', 'probe1');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wnl-netns-'));
  });

  after(async () => {
    sleeper?.kill();
    pool.cleanup();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('opens a bind-mounted namespace file with no process inside and reports its inode', async () => {
    const h = await NetnsHandle.open(netnsPath(ns));
    try {
      expect(h.inode).to.equal(netnsInode(ns));
      expect(h.isOwn).to.equal(false);
    } finally {
      h.close();
    }
  });

  it('opens /proc/<pid>/ns/net of a process living in the namespace', async () => {
    sleeper = spawn('ip', ['netns', 'exec', ns, 'sleep', '30'], { stdio: 'ignore' });
    // `ip netns exec` execs sleep in place, so the pid is sleep's once it has switched namespaces.
    const procPath = `/proc/${sleeper.pid}/ns/net`;
    for (let i = 0; i < 50 && fs.statSync(procPath).ino !== netnsInode(ns); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const h = await NetnsHandle.open(procPath);
    try {
      expect(h.inode).to.equal(netnsInode(ns));
    } finally {
      h.close();
    }
  });

  it('resolves a bind-mounted namespace file and a /proc/<pid>/ns/net link without the threadpool', async () => {
    const opens = await threadpoolOpens(async () => {
      for (const p of [netnsPath(ns), `/proc/${process.pid}/ns/net`]) (await NetnsHandle.open(p)).close();
    });
    expect(opens).to.equal(0);
  });

  it('follows a symlink to a namespace file (resolved off the event loop) and reports the target', async () => {
    const link = path.join(tmp, 'link-to-ns');
    fs.symlinkSync(netnsPath(ns), link);
    let h: NetnsHandle | undefined;
    const opens = await threadpoolOpens(async () => {
      h = await NetnsHandle.open(link, { workload: true });
    });
    try {
      expect(opens).to.equal(1);
      expect(h?.inode).to.equal(netnsInode(ns));
    } finally {
      h?.close();
      fs.unlinkSync(link);
    }
  });

  it("refuses a symlink to the host's namespace as a workload's", async () => {
    const link = path.join(tmp, 'link-to-own');
    fs.symlinkSync('/proc/self/ns/net', link);
    try {
      await expectRejected(
        NetnsHandle.open(link, { workload: true }),
        'protected',
        'INVALID_ARGUMENT',
        /refusing/,
      );
    } finally {
      fs.unlinkSync(link);
    }
  });

  it('rejects a regular file', async () => {
    const file = path.join(tmp, 'not-a-netns');
    fs.writeFileSync(file, 'x');
    await expectRejected(
      NetnsHandle.open(file),
      'not-a-netns',
      'INVALID_ARGUMENT',
      /is not a namespace file \(it is a regular file/,
    );
  });

  it('rejects a directory', async () => {
    await expectRejected(NetnsHandle.open(tmp), 'not-a-netns', 'INVALID_ARGUMENT', /it is a directory/);
  });

  it('rejects a mount namespace path', async () => {
    await expectRejected(
      NetnsHandle.open('/proc/self/ns/mnt'),
      'not-a-netns',
      'INVALID_ARGUMENT',
      /is a mount namespace, not a network namespace/,
    );
  });

  it("names the type of another process's namespace of the wrong type, not a permission or a missing workload", async () => {
    // PID 1's links need ptrace rights over it: the open itself may be refused, so the name must tell.
    for (const [link, kind] of [
      ['/proc/1/ns/pid', 'PID'],
      ['/proc/1/ns/mnt', 'mount'],
      ['/proc/1/ns/user', 'user'],
      [`/proc/${process.pid}/ns/uts`, 'UTS'],
      ['/proc/1/task/1/ns/pid_for_children', 'PID'],
    ] as const) {
      for (const workload of [true, false]) {
        await expectRejected(
          NetnsHandle.open(link, { workload }),
          'not-a-netns',
          'INVALID_ARGUMENT',
          new RegExp(
            `^netns path ${link} is an? ${kind} namespace, not a network namespace \\(use /proc/.*/net\\)$`,
          ),
        );
      }
      expect(() => NetnsHandle.openSync(link)).to.throw(NetnsError, `is a ${kind} namespace`);
    }
  });

  it('records the device of the directory a namespace was found in (procfs for /proc/<pid>/ns/net)', async () => {
    for (const [p, dir] of [
      [netnsPath(ns), path.dirname(netnsPath(ns))],
      [`/proc/${process.pid}/ns/net`, '/proc'],
    ] as const) {
      const h = await NetnsHandle.open(p);
      try {
        expect(h.dirDev, p).to.equal(fs.statSync(dir).dev);
      } finally {
        h.close();
      }
    }
  });

  it('rejects a FIFO without hanging', async () => {
    const fifo = path.join(tmp, 'fifo');
    await new Promise<void>((resolve, reject) =>
      spawn('mkfifo', [fifo]).on('exit', (c) => (c === 0 ? resolve() : reject(new Error(`mkfifo ${c}`)))),
    );
    await expectRejected(NetnsHandle.open(fifo), 'not-a-netns', 'INVALID_ARGUMENT', /FIFO/);
  });

  it('reports a missing path as not found, an invalid argument to Attach', async () => {
    const err = await NetnsHandle.open(netnsPath('wnl-does-not-exist')).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(NetnsError);
    expect((err as NetnsError).notFound).to.equal(true);
    await expectRejected(
      NetnsHandle.open(netnsPath('wnl-does-not-exist')),
      'missing',
      'INVALID_ARGUMENT',
      /cannot be opened \(ENOENT\); is the workload still running\?/,
    );
  });

  it("refuses the daemon's own namespace as a workload's, and accepts it otherwise", async () => {
    await expectRejected(
      NetnsHandle.open('/proc/self/ns/net', { workload: true }),
      'protected',
      'INVALID_ARGUMENT',
      /the daemon's own network namespace; refusing to attach a workload to it/,
    );
    const h = await NetnsHandle.open('/proc/self/ns/net');
    h.close();
  });

  it('refuses a relative or unnormalised path as a workload namespace', async () => {
    await expectRejected(
      NetnsHandle.open('var/run/netns/x', { workload: true }),
      'not-a-netns',
      'INVALID_ARGUMENT',
      /must be absolute and normalised/,
    );
    await expectRejected(
      NetnsHandle.open(`/var/run/netns/../netns/${ns}`, { workload: true }),
      'not-a-netns',
      'INVALID_ARGUMENT',
      /must be absolute and normalised/,
    );
  });

  it('tells whether a recorded namespace is still the one at its path', async () => {
    expect(await netnsStillPresent(netnsPath(ns), netnsInode(ns))).to.equal(true);
    expect(await netnsStillPresent(netnsPath(ns), netnsInode(ns) + 1)).to.equal(false);
    expect(await netnsStillPresent(netnsPath('wnl-does-not-exist'), 1)).to.equal(false);
  });

  it('counts only a path that names nothing or another namespace as gone, not one it cannot see', async () => {
    expect(await netnsPresence(netnsPath(ns), netnsInode(ns))).to.equal('present');
    expect(await netnsPresence(netnsPath(ns), netnsInode(ns) + 1)).to.equal('gone');
    expect(await netnsPresence(netnsPath('wnl-does-not-exist'), 1)).to.equal('gone');
    // What a mount namespace the bind mount never propagated to sees: the file it covers.
    const covered = path.join(tmp, 'covered');
    fs.writeFileSync(covered, '');
    expect(await netnsPresence(covered, fs.statSync(covered).ino)).to.equal('unseen');
    // A process that exited: its /proc entry is gone.
    const exited = spawn('true');
    await new Promise((r) => exited.once('exit', r));
    await new Promise((r) => setTimeout(r, 50));
    expect(await netnsPresence(`/proc/${exited.pid}/ns/net`, netnsInode(ns))).to.equal('gone');
  });

  it("recognises the process's own namespace", async () => {
    const h = await NetnsHandle.open('/proc/self/ns/net');
    try {
      expect(h.isOwn).to.equal(true);
    } finally {
      h.close();
    }
  });

  it('creates a netlink socket that sees the target namespace, and returns the main thread to its own', async () => {
    const before = threadNetnsInode();
    const h = await NetnsHandle.open(netnsPath(ns));
    const sock = NetlinkSocket.openIn(h);
    try {
      expect(threadNetnsInode()).to.equal(before);
      const names = (await listLinks(sock)).map((l) => l.name).sort();
      expect(names).to.deep.equal(['lo', 'probe0', 'probe1']);
    } finally {
      await sock.close();
      h.close();
    }
  });

  it("reads a /proc/sys value of the target namespace, not the process's own", async () => {
    // rp_filter of the test namespace's probe0: set to 2 there; the file only exists in that namespace.
    await netnsExec(ns, 'sh', '-c', 'echo 2 > /proc/sys/net/ipv4/conf/probe0/rp_filter');
    const h = await NetnsHandle.open(netnsPath(ns));
    try {
      expect(await readSysctl(h, 'net/ipv4/conf/probe0/rp_filter')).to.equal('2');
      expect(fs.existsSync('/proc/sys/net/ipv4/conf/probe0')).to.equal(false);
      expect(threadNetnsInode()).to.equal(fs.statSync('/proc/self/ns/net').ino);
    } finally {
      h.close();
    }
  });

  it('refuses /proc/sys paths that climb out of /proc/sys', async () => {
    const h = NetnsHandle.own();
    expect(() => openProcSysFile(h, '../self/environ', 'r')).to.throw(TypeError, /bad \/proc\/sys path/);
    expect(() => openProcSysFile(h, '/etc/passwd', 'r')).to.throw(TypeError);
  });

  it('refuses to use a closed handle', async () => {
    const h = await NetnsHandle.open(netnsPath(ns));
    h.close();
    expect(() => NetlinkSocket.openIn(h)).to.throw(/closed/);
  });
});
