import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describeRoot } from './describe-root';
import { FabricCluster, STATIC_HYBRID, usualNodes, type ClusterNode } from './fabric-cluster';

// The fabric cluster rig leaves nothing behind: every namespace it made and every daemon it started are
// gone after teardown, and after a start that fails half-way (one daemon up, the next refusing its
// flags), since a suite whose `before` throws has no cluster to tear down.

function namespaces(): Set<string> {
  return new Set(
    execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.split(' ')[0] ?? '')
      .filter(Boolean),
  );
}

/** Processes whose command line names `dir` (the daemons' sockets and state live there). */
function processesUnder(dir: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir);
      } catch {
        return false; // Gone while we read.
      }
    })
    .map(Number);
}

describeRoot('fabric cluster rig (real daemons, real kernel)', function () {
  this.timeout(60_000);

  it('deletes every namespace it made and ends every daemon at teardown', async () => {
    const c = await FabricCluster.start({
      ...STATIC_HYBRID,
      nodes: usualNodes({ na: { range: 1 }, nc: { range: 3 } }),
      podsPerNode: 1,
    });
    const made = [
      c.topo.underlay,
      c.topo.router,
      ...c.nodes.flatMap((n) => [n.ns, ...n.pods.map((p) => p.ns)]),
    ];
    expect([...namespaces()].filter((n) => made.includes(n))).to.have.members(made);
    const pids = c.nodes.map((n) => n.daemon?.child.pid);
    expect(processesUnder(c.root)).to.include.members(pids);
    await c.teardown();
    expect(
      [...namespaces()].filter((n) => made.includes(n)),
      'namespaces left',
    ).to.deep.equal([]);
    expect(processesUnder(c.root), 'daemons left').to.deep.equal([]);
    expect(fs.existsSync(c.root), 'its directory left').to.equal(false);
  });

  it('leaves nothing behind when a daemon refuses to start, and says why', async () => {
    const prepared: ClusterNode[] = [];
    const failed = await FabricCluster.start({
      ...STATIC_HYBRID,
      nodes: usualNodes({ na: { range: 1 }, nc: { range: 3, flags: () => ({ 'pod-cidr': 'not-a-range' }) } }),
      prepare: (n) => void prepared.push(n),
    }).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(failed?.message).to.match(/daemon exited during start-up/);
    expect(prepared).to.have.length(2);
    const root = path.dirname((prepared[0] as ClusterNode).dir);
    const left = namespaces();
    expect(
      prepared.map((n) => n.ns).filter((n) => left.has(n)),
      'node namespaces left',
    ).to.deep.equal([]);
    expect(processesUnder(root), 'daemons left').to.deep.equal([]);
    expect(fs.existsSync(root), 'its directory left').to.equal(false);
  });
});
