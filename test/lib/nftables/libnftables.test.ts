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

  /** Runs `body` with a context made in a fresh namespace (it keeps no handle), then closes it. */
  async function withContext(body: (ctx: NftContext, ns: string) => Promise<void>): Promise<void> {
    const ns = nss.add();
    const handle = await NetnsHandle.open(ns.path);
    const ctx = NftContext.open(handle);
    handle.close();
    try {
      await body(ctx, ns.name);
    } finally {
      await ctx.close();
    }
  }

  it("changes the namespace the context was made in, and not the process's own", async () => {
    requireProgram('nft');
    const name = `wntest_${process.pid}`;
    await withContext(async (ctx, ns) => {
      await ctx.run(`add table inet ${name}\n`);
      expect(tables(ns)).to.contain(`table inet ${name}`);
      expect(execFileSync('nft', ['list', 'tables'], { encoding: 'utf8' })).to.not.contain(name);
      const json = JSON.parse(await ctx.run(`list table inet ${name}\n`, { json: true })) as {
        nftables: unknown[];
      };
      expect(json.nftables.some((o) => JSON.stringify(o).includes(name))).to.equal(true);
    });
  });

  it("rejects with nft's own words, and runs a failed transaction not at all", async () => {
    await withContext(async (ctx, ns) => {
      const err = await ctx.run('add table inet ok\nadd chain inet nope c\n').then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(err).to.be.instanceOf(NftablesError);
      expect(err?.message).to.match(/^Error: No such file or directory\n/);
      expect(tables(ns)).to.not.contain('table inet ok');
    });
  });

  it('runs the commands of one context one at a time, in order', async () => {
    await withContext(async (ctx) => {
      const runs = Array.from({ length: 20 }, (_, i) =>
        ctx.run(i === 0 ? 'add table inet seq\n' : `add chain inet seq c${i}\n`),
      );
      await Promise.all(runs);
      const out = await ctx.run('list table inet seq\n');
      expect((out.match(/chain c\d+/g) ?? []).length).to.equal(19);
    });
  });
});
