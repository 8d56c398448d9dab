import { expect } from 'chai';
import { readdir } from 'node:fs/promises';
import { benchReferenceCni } from '../bench/reference-cni';
import { NETNS_DIR } from './support/netns';

// Keeps the baseline benchmark working between benchmark runs: a tiny run must measure real ADD/DEL
// calls of the reference plugins and leave no namespace behind.

describe('reference CNI benchmark', function () {
  this.timeout(60_000);

  for (const plugin of ['ptp', 'bridge'] as const) {
    it(`measures ${plugin} ADD and DEL and deletes its namespaces afterwards`, async () => {
      const before = await benchNamespaces();
      const rows = await benchReferenceCni({ plugin, count: 3, parallel: 2 });
      expect(rows.map((r) => r.op)).to.deep.equal(['attach', 'detach']);
      for (const row of rows) {
        expect(row.name).to.equal(`${plugin}+host-local`);
        expect(row.p50Ms).to.be.greaterThan(0);
        expect(row.p99Ms).to.be.at.least(row.p50Ms);
        expect(row.perSecondAtParallel).to.be.greaterThan(0);
      }
      expect(await benchNamespaces()).to.deep.equal(before);
    });
  }
});

async function benchNamespaces(): Promise<string[]> {
  const names = await readdir(NETNS_DIR).catch(() => [] as string[]);
  return names.filter((n) => n.startsWith('wne-bn-') || n.startsWith('wne-bw-')).sort();
}
