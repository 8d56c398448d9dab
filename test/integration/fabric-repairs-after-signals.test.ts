import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { describeRoot } from '../support/describe-root';
import { FabricCluster, STATIC_HYBRID, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { waitUntil } from '../support/wait-until';

// Repairs go on after the daemon is stopped and continued (SIGSTOP/SIGCONT: a debugger, the cgroup
// freezer, `docker pause`). A read with SO_RCVTIMEO is not restarted after a stop signal: the drift
// monitor's blocking read comes back with EINTR. The daemon must read again (or start a new monitor),
// so that a route deleted by hand afterwards is back within a second, not at the periodic pass.

const ROUTE = '10.244.3.0/24';

describeRoot('fabric repairs after SIGSTOP/SIGCONT of the daemon (real daemon, real kernel)', function () {
  this.timeout(120_000);
  let c: FabricCluster;
  let na: ClusterNode;

  before(async () => {
    c = await FabricCluster.start({
      ...STATIC_HYBRID,
      // The peer behind the router is over VXLAN; it needs no daemon of its own for na to route to it.
      nodes: usualNodes({ na: { range: 1 }, nc: { range: 3, daemon: false } }),
    });
    na = c.node('na');
    await waitUntil(() => routed(), 'na routes to nc', 20_000);
  });

  after(async () => {
    await c?.teardown();
  });

  const routed = (): boolean => c.routes(na).some((r) => r.startsWith(ROUTE));

  const monitorLog = (): string =>
    fs
      .readFileSync(na.daemon?.logFile ?? '', 'utf8')
      .split('\n')
      .filter((l) => /drift monitor|converge failed/.test(l))
      .join('\n');

  async function stopAndContinue(): Promise<void> {
    c.signal(na, 'SIGSTOP');
    // Longer than the monitor's read timeout: its read is the one the signal cuts short.
    await new Promise((r) => setTimeout(r, 800));
    c.signal(na, 'SIGCONT');
    // Time for the monitor to have died (on the old code) or read again.
    await new Promise((r) => setTimeout(r, 700));
  }

  it('puts a deleted peer route back within a second after each of three stop/continue cycles', async () => {
    for (let round = 1; round <= 3; round++) {
      await stopAndContinue();
      execFileSync('ip', ['-n', na.ns, 'route', 'del', ROUTE, 'proto', '119']);
      expect(routed(), `round ${round}: the route deleted`).to.equal(false);
      const deleted = Date.now();
      await waitUntil(() => routed(), `round ${round}: the route back within 1 s`, 1_000, {
        intervalMs: 20,
      }).catch((err: Error) => {
        throw new Error(`${err.message}; the daemon's monitor said:\n${monitorLog()}`);
      });
      expect(Date.now() - deleted, `round ${round}`).to.be.below(1_000);
    }
    expect(c.peersView(na).warnings.join('\n')).to.not.match(/drift monitor down/);
  });
});
