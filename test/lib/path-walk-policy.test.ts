import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PathWalkPolicy } from '../../lib/netns/path-walk-policy';

describe('path walk policy (which namespace paths are resolved on the event loop)', () => {
  let tmp: string;
  before(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-walk-'));
  });
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it("allows a process's namespace file (procfs), and answers at once the second time", async () => {
    const policy = new PathWalkPolicy();
    expect(await policy.syncWalkAllowed('/proc/self/ns/net')).to.equal(true);
    // Another pid shares procfs's verdict: no second look.
    expect(policy.syncWalkAllowed(`/proc/${process.pid}/task/${process.pid}/ns/net`)).to.equal(true);
  });

  it('judges a path through /proc/<pid>/root by where it leads, not as procfs', async () => {
    const policy = new PathWalkPolicy();
    // /proc/self/root/sys/kernel is sysfs, which is not on the list of local filesystems.
    expect(await policy.syncWalkAllowed('/proc/self/root/sys/kernel/x')).to.equal(false);
    expect(await policy.syncWalkAllowed('/proc/self/../sys/kernel/ns/net')).to.equal(false);
  });

  it('refuses a directory on a filesystem it does not know to be local, and a missing one', async () => {
    const policy = new PathWalkPolicy();
    expect(await policy.syncWalkAllowed('/sys/kernel/netns-file')).to.equal(false);
    expect(await policy.syncWalkAllowed(path.join(tmp, 'missing', 'ns'))).to.equal(false);
  });

  it('allows the directory of the state and test files (a local disk or tmpfs here)', async () => {
    const policy = new PathWalkPolicy();
    expect(await policy.syncWalkAllowed(path.join(tmp, 'ns'))).to.equal(true);
  });

  it('keeps a verdict for a minute, then looks again', async () => {
    let now = 1_000_000;
    const policy = new PathWalkPolicy(() => now);
    const dir = path.join(tmp, 'later');
    expect(await policy.syncWalkAllowed(path.join(dir, 'ns'))).to.equal(false);
    fs.mkdirSync(dir);
    now += 59_000;
    expect(policy.syncWalkAllowed(path.join(dir, 'ns'))).to.equal(false);
    now += 2_000;
    const again = policy.syncWalkAllowed(path.join(dir, 'ns'));
    expect(again).to.be.instanceOf(Promise);
    expect(await again).to.equal(true);
  });
});
