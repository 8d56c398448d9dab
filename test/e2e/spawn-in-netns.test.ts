import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { addNetns, deleteNetns, uniqueNetnsName } from './support/netns';
import { spawnInNetns } from './support/spawn-in-netns';

// The benchmarks start CNI plugins with spawnInNetns; a plugin started in the wrong namespace would
// program the machine's own network, so both halves of the switch are pinned here.

describe('spawnInNetns', () => {
  const name = uniqueNetnsName('wne-', 'spawn');
  let path = '';

  before(async () => {
    path = await addNetns(name);
  });
  after(async () => {
    await deleteNetns(name);
  });

  it('starts the child inside the given namespace and leaves this process where it was', async () => {
    const target = await stat(path);
    const own = await stat('/proc/thread-self/ns/net');
    expect(target.ino).to.not.equal(own.ino);

    const childNs = await output(spawnInNetns(path, 'readlink', ['/proc/self/ns/net'], { stdio: 'pipe' }));
    expect(childNs.trim()).to.equal(`net:[${target.ino}]`);

    expect((await stat('/proc/thread-self/ns/net')).ino).to.equal(own.ino);
    const laterChildNs = await output(spawn('readlink', ['/proc/self/ns/net'], { stdio: 'pipe' }));
    expect(laterChildNs.trim()).to.equal(`net:[${own.ino}]`);
  });

  it('throws, and starts nothing, for a path that is not a namespace', () => {
    expect(() => spawnInNetns('/etc/hostname', 'true', [], { stdio: 'ignore' })).to.throw(/setns/);
  });
});

function output(child: ReturnType<typeof spawn>): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    child.stdout?.on('data', (b: Buffer) => (text += b.toString('utf8')));
    child.on('error', reject);
    child.on('close', () => resolve(text));
  });
}
