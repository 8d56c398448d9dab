import { expect } from 'chai';
import { describeEtcd } from '../support/etcd-suite';
import * as fc from 'fast-check';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Etcd3 } from 'etcd3';
import { claimBlock } from '../../../sources/etcd/block-claimer';
import { blockAt, blockIndex, blockLayout, type BlockLayout } from '../../../sources/etcd/block-layout';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { EtcdCluster } from '../../support/etcd-cluster';

// The block claim logic run against a plain model of ownership (block → node), on a real 3-member etcd
// cluster: random sequences of claims, releases and concurrent claims by several nodes. After every
// step etcd's keys must equal the model, a claim must return a block that was free, concurrent claims
// must never return one block twice, and "full" must mean every block is owned.

const NODES = ['n1', 'n2', 'n3', 'n4'];

interface Model {
  owners: Map<string, string>;
}
interface Real {
  registry: BlockRegistry;
  layout: BlockLayout;
}

async function expectSame(model: Model, real: Real): Promise<void> {
  const stored = await real.registry.blocks();
  expect([...stored].sort()).to.deep.equal([...model.owners].sort());
}

class Claim implements fc.AsyncCommand<Model, Real> {
  constructor(readonly node: string) {}
  check = (): boolean => true;
  async run(model: Model, real: Real): Promise<void> {
    const res = await claimBlock(real.registry, real.layout, this.node);
    if ('full' in res) {
      expect(BigInt(model.owners.size)).to.equal(real.layout.count);
    } else {
      expect(model.owners.has(res.block), `${res.block} was free`).to.equal(false);
      expect(blockIndex(real.layout, res.block)).to.not.equal(undefined);
      model.owners.set(res.block, this.node);
    }
    await expectSame(model, real);
  }
  toString = (): string => `claim(${this.node})`;
}

class Release implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly node: string,
    readonly index: number,
  ) {}
  check = (): boolean => true;
  async run(model: Model, real: Real): Promise<void> {
    const block = blockAt(real.layout, BigInt(this.index) % real.layout.count);
    const released = await real.registry.release(block, this.node);
    expect(released, `release ${block} by ${this.node}`).to.equal(model.owners.get(block) === this.node);
    if (released) model.owners.delete(block);
    await expectSame(model, real);
  }
  toString = (): string => `release(${this.node}, #${this.index})`;
}

class ConcurrentClaims implements fc.AsyncCommand<Model, Real> {
  constructor(readonly nodes: string[]) {}
  check = (): boolean => true;
  async run(model: Model, real: Real): Promise<void> {
    const free = Number(real.layout.count) - model.owners.size;
    const results = await Promise.all(this.nodes.map((n) => claimBlock(real.registry, real.layout, n)));
    const claimed: string[] = [];
    results.forEach((res, i) => {
      if ('full' in res) return;
      expect(model.owners.has(res.block), `${res.block} was free`).to.equal(false);
      model.owners.set(res.block, this.nodes[i]!);
      claimed.push(res.block);
    });
    expect(new Set(claimed).size, 'no block claimed twice').to.equal(claimed.length);
    expect(claimed.length).to.equal(Math.min(free, this.nodes.length));
    await expectSame(model, real);
  }
  toString = (): string => `concurrently(${this.nodes.join(', ')})`;
}

describeEtcd('etcd block claims against a model (property, real 3-member etcd cluster)', function () {
  this.timeout(300_000);
  let root: string;
  let etcd: EtcdCluster;
  let client: Etcd3;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-pools-prop-'));
    etcd = await EtcdCluster.start(path.join(root, 'etcd'));
    client = etcd.client();
  });
  after(async () => {
    client?.close();
    await etcd?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('claims and releases agree with the model, and concurrent claims never share a block', async () => {
    // 8 blocks, so runs reach "full" and contention often.
    const layout = blockLayout('10.200.0.0/26', 29);
    const node = fc.constantFrom(...NODES);
    const commands = fc.commands(
      [
        node.map((n) => new Claim(n)),
        fc.tuple(node, fc.nat(15)).map(([n, i]) => new Release(n, i)),
        fc.uniqueArray(node, { minLength: 2, maxLength: 4 }).map((ns) => new ConcurrentClaims(ns)),
      ],
      { maxCommands: 25 },
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(commands, async (cmds) => {
        // Each run starts from an empty key space of its own.
        const registry = new BlockRegistry(client, `/prop/${run++}`);
        await fc.asyncModelRun(() => ({ model: { owners: new Map() }, real: { registry, layout } }), cmds);
      }),
      { numRuns: 40 },
    );
  });
});
