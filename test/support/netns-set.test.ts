import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { isRoot } from './netns';

// The test helpers' own promise: namespaces a test or benchmark made are gone when its process ends,
// also when it is interrupted before its cleanup runs. A child process makes them, then ends one way or
// another; the namespaces it printed must then be gone.

const describeRoot = isRoot ? describe : describe.skip;

/** Starts a child that makes `count` namespaces, prints their names, then waits (or exits at once). */
function child(count: number, then: 'wait' | 'exit'): ReturnType<typeof spawn> {
  const script = `
    const { NetnsSet } = require(${JSON.stringify(path.join(__dirname, 'netns.js'))});
    const set = new NetnsSet('wnt-sig-');
    const names = Array.from({ length: ${count} }, () => set.add().name);
    console.log(names.join(' '));
    ${then === 'wait' ? 'setInterval(() => undefined, 1000);' : 'process.exit(3);'}
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

describeRoot('NetnsSet (test helper)', function () {
  this.timeout(30_000);

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`deletes its namespaces when its process is ended by ${signal}, which still ends it`, async () => {
      const c = child(5, 'wait');
      const done = ended(c);
      const names = await firstLine(c);
      expect(names).to.have.lengthOf(5);
      expect(names.every(exists), 'made').to.equal(true);
      c.kill(signal);
      expect(await done).to.deep.equal({ code: null, signal });
      expect(names.filter(exists), 'left behind').to.deep.equal([]);
    });
  }

  it('deletes its namespaces when its process exits without cleaning up', async () => {
    const c = child(3, 'exit');
    const done = ended(c);
    const names = await firstLine(c);
    expect(await done).to.deep.equal({ code: 3, signal: null });
    expect(names).to.have.lengthOf(3);
    expect(names.filter(exists), 'left behind').to.deep.equal([]);
  });
});
