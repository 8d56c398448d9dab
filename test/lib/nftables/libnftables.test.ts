import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { NftContext, NftablesError } from '../../../lib/nftables/libnftables';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { NetnsSet } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { requireProgram } from '../../support/system-program';

// The libnftables binding: a context acts in the namespace it was made in, whatever thread runs its
// commands, and says what nft said when a command fails.

const tables = (ns: string): string =>
  execFileSync('ip', ['netns', 'exec', ns, 'nft', 'list', 'tables'], { encoding: 'utf8' });

describeRoot('libnftables binding (root, test-owned namespaces)', function () {
  this.timeout(30_000);
  const nss = new NetnsSet('wnnft-');
  after(() => nss.cleanup());

  it("changes the namespace the context was made in, and not the process's own", async () => {
    requireProgram('nft');
    const ns = nss.add();
    const handle = await NetnsHandle.open(ns.path);
    const ctx = NftContext.open(handle);
    handle.close();
    const name = `wntest_${process.pid}`;
    try {
      await ctx.run(`add table inet ${name}\n`);
      expect(tables(ns.name)).to.contain(`table inet ${name}`);
      expect(execFileSync('nft', ['list', 'tables'], { encoding: 'utf8' })).to.not.contain(name);
      const json = JSON.parse(await ctx.run(`list table inet ${name}\n`, { json: true })) as {
        nftables: unknown[];
      };
      expect(json.nftables.some((o) => JSON.stringify(o).includes(name))).to.equal(true);
    } finally {
      await ctx.close();
    }
  });

  it("rejects with nft's own words, and runs a failed transaction not at all", async () => {
    const ns = nss.add();
    const handle = await NetnsHandle.open(ns.path);
    const ctx = NftContext.open(handle);
    handle.close();
    try {
      const err = await ctx.run('add table inet ok\nadd chain inet nope c\n').then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(err).to.be.instanceOf(NftablesError);
      expect(err?.message).to.match(/^Error: No such file or directory\n/);
      expect(tables(ns.name)).to.not.contain('table inet ok');
    } finally {
      await ctx.close();
    }
  });

  it('runs the commands of one context one at a time, in order', async () => {
    const ns = nss.add();
    const handle = await NetnsHandle.open(ns.path);
    const ctx = NftContext.open(handle);
    handle.close();
    try {
      const runs = Array.from({ length: 20 }, (_, i) =>
        ctx.run(i === 0 ? 'add table inet seq\n' : `add chain inet seq c${i}\n`),
      );
      await Promise.all(runs);
      const out = await ctx.run('list table inet seq\n');
      expect((out.match(/chain c\d+/g) ?? []).length).to.equal(19);
    } finally {
      await ctx.close();
    }
  });
});
