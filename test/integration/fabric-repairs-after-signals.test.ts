import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  FabricTopology,
  fabricRoutes,
  peersFileEntry,
  writePeersFile,
  type BareNode,
} from '../support/fabric-topology';
import { CLI, DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { waitUntil } from '../support/wait-until';

// Repairs go on after the daemon is stopped and continued (SIGSTOP/SIGCONT: a debugger, the cgroup
// freezer, `docker pause`). A read with SO_RCVTIMEO is not restarted after a stop signal: the drift
// monitor's blocking read comes back with EINTR. The daemon must read again (or start a new monitor),
// so that a route deleted by hand afterwards is back within a second, not at the periodic pass.

const ROUTE = '10.244.3.0/24';

describeRoot('fabric repairs after SIGSTOP/SIGCONT of the daemon (real daemon, real kernel)', function () {
  this.timeout(120_000);
  const topo = new FabricTopology();
  let na: BareNode;
  let dir: string;
  let daemon: DaemonProcess | undefined;

  before(async () => {
    await topo.build([]);
    na = await topo.addBareNode({ name: 'na', subnet: 1, host: 1 });
    // The peer behind the router is over VXLAN; it needs no daemon of its own for na to route to it.
    await topo.addBareNode({ name: 'nc', subnet: 2, host: 3 });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fab-sig-'));
    const peersFile = path.join(dir, 'peers.json');
    writePeersFile(peersFile, [peersFileEntry('nc', '10.100.2.3', [ROUTE])]);
    daemon = await DaemonProcess.start({
      dir,
      netns: na.ns,
      flags: { 'pod-cidr': '10.244.1.0/24', mtu: '1450', fabric: 'hybrid', 'peers-file': peersFile },
    });
    await waitUntil(() => routed(), 'na routes to nc', 20_000);
  });

  after(async () => {
    await daemon?.stop().catch(() => undefined);
    topo.cleanup();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const routed = (): boolean => fabricRoutes(na.ns).some((r) => r.startsWith(ROUTE));
  const warnings = (): string[] =>
    (
      JSON.parse(
        execFileSync(process.execPath, [CLI, 'peers', '--json', '--socket', path.join(dir, 'api.sock')], {
          encoding: 'utf8',
        }),
      ) as { warnings: string[] }
    ).warnings;

  const monitorLog = (): string =>
    fs
      .readFileSync(daemon?.logFile ?? '', 'utf8')
      .split('\n')
      .filter((l) => /drift monitor|converge failed/.test(l))
      .join('\n');

  async function stopAndContinue(): Promise<void> {
    const pid = daemon?.child.pid;
    if (pid === undefined) throw new Error('no daemon');
    process.kill(pid, 'SIGSTOP');
    // Longer than the monitor's read timeout: its read is the one the signal cuts short.
    await new Promise((r) => setTimeout(r, 800));
    process.kill(pid, 'SIGCONT');
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
    expect(warnings().join('\n')).to.not.match(/drift monitor down/);
  });
});
