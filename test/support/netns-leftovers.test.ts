import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeRoot } from './describe-root';

// The test helpers' own promise (netns-leftovers.ts): namespaces a test or benchmark made are gone when
// its process ends, also when it is interrupted before its cleanup runs. A child process makes them,
// then ends one way or another; the namespaces it printed must then be gone.

/** What makes the namespaces in the child: one at a time, or in one batch (as the benchmarks do). */
type Maker = 'NetnsSet' | 'NetnsSet.addMany';

const MAKE: Record<Maker, (count: number) => string> = {
  NetnsSet: (count) => `
    const { NetnsSet } = require(${JSON.stringify(path.join(__dirname, 'netns.js'))});
    const set = new NetnsSet('wnt-sig-');
    const made = Promise.resolve(Array.from({ length: ${count} }, () => set.add().name));`,
  'NetnsSet.addMany': (count) => `
    const { NetnsSet } = require(${JSON.stringify(path.join(__dirname, 'netns.js'))});
    const set = new NetnsSet('wnt-sig-');
    const made = Promise.resolve(set.addMany(${count}).map((ns) => ns.name));`,
};

/** Starts a child that makes `count` namespaces, prints their names, then waits (or exits at once). */
function child(maker: Maker, count: number, then: 'wait' | 'exit'): ReturnType<typeof spawn> {
  const script = `${MAKE[maker](count)}
    made.then((names) => {
      console.log(names.join(' '));
      ${then === 'wait' ? 'setInterval(() => undefined, 1000);' : 'process.exit(3);'}
    });
  `;
  return spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
}

function firstLine(c: ReturnType<typeof spawn>): Promise<string[]> {
  return new Promise((resolve, reject) => {
    let out = '';
    c.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(out.slice(0, nl).split(' '));
    });
    c.once('error', reject);
  });
}

function ended(c: ReturnType<typeof spawn>): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve) => c.once('exit', (code, signal) => resolve({ code, signal })));
}

const exists = (name: string): boolean => fs.existsSync(`/var/run/netns/${name}`);

describeRoot('namespaces made by the test helpers', function () {
  this.timeout(30_000);

  for (const [maker, signal] of [
    ['NetnsSet', 'SIGTERM'],
    ['NetnsSet', 'SIGINT'],
    ['NetnsSet.addMany', 'SIGTERM'],
  ] as const) {
    it(`are deleted when a process that made them with ${maker} is ended by ${signal}, which still ends it`, async () => {
      const c = child(maker, 5, 'wait');
      const done = ended(c);
      const names = await firstLine(c);
      expect(names).to.have.lengthOf(5);
      expect(names.every(exists), 'made').to.equal(true);
      c.kill(signal);
      expect(await done).to.deep.equal({ code: null, signal });
      expect(names.filter(exists), 'left behind').to.deep.equal([]);
    });
  }

  it('are deleted when the process that made them exits without cleaning up', async () => {
    const c = child('NetnsSet', 3, 'exit');
    const done = ended(c);
    const names = await firstLine(c);
    expect(await done).to.deep.equal({ code: 3, signal: null });
    expect(names).to.have.lengthOf(3);
    expect(names.filter(exists), 'left behind').to.deep.equal([]);
  });
});
