import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';

// The host port (core/host-port/host-port.ts) is recorded like any attachment, but its namespace is the
// node's own: whatever reclaims attachments by their namespace must never take it. Each test tries:
// its namespace path made to name nothing at a start-up reconcile and under forced sweeps, and a
// runtime's keep list that does not name it. A daemon in this process with a recording backend and
// stand-in namespaces (no root needed).

const KEY = 'workloadnet-host-port/wn-host0';

describe('the host port and the reclaimers', function () {
  this.timeout(60_000);
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon | undefined;
  let backend: RecordingBackend;
  let hostNs: { name: string; path: string };
  let pod: { name: string; path: string };

  afterEach(async () => {
    await d?.dispose();
    d = undefined;
  });
  after(() => namespaces.cleanup());

  /**
   * A daemon whose store holds the host port (and a pod) from an earlier start; the store exists
   * already, as after any restart.
   */
  async function startWithHostPort(): Promise<InProcessDaemon> {
    backend = new RecordingBackend();
    hostNs = namespaces.add();
    pod = namespaces.add();
    const overrides = { sweepIntervalMs: 0 };
    const first = await InProcessDaemon.start(backend, overrides, { netns: namespaces });
    await first.daemon.service.attach({ workloadId: 'pod', netnsPath: pod.path, ifName: 'eth0' });
    await first.stop();
    const store = Store.open(path.join(first.dir, 'state'));
    await store.put(hostPortRow(hostNs.path, fs.statSync(hostNs.path).ino));
    await store.close();
    d = await InProcessDaemon.start(backend, overrides, { netns: namespaces, dir: first.dir });
    return d;
  }

  const rowsOf = async (): Promise<string[]> =>
    [...(await d!.daemon.service.list())].map((a) => a.key).sort();
  const hostPortCalls = (): string[] => backend.calls.filter((c) => c.key === KEY).map((c) => c.op);

  it('the start-up reconcile neither releases nor repairs it when its dataplane and namespace look gone', async () => {
    const hostNsGone = namespaces.add();
    fs.rmSync(hostNsGone.path);
    backend = new RecordingBackend();
    pod = namespaces.add();
    const first = await InProcessDaemon.start(backend, { sweepIntervalMs: 0 }, { netns: namespaces });
    await first.daemon.service.attach({ workloadId: 'pod', netnsPath: pod.path, ifName: 'eth0' });
    await first.stop();
    const store = Store.open(path.join(first.dir, 'state'));
    await store.put(hostPortRow(hostNsGone.path, 424242));
    await store.close();
    d = await InProcessDaemon.start(backend, { sweepIntervalMs: 0 }, { netns: namespaces, dir: first.dir });
    expect(await rowsOf()).to.deep.equal(['pod/eth0', KEY]);
    expect(hostPortCalls(), 'no teardown, no repair').to.deep.equal([]);
    expect(d.daemon.service.sweeper.hold).to.equal(undefined);
  });

  it("a keep-list GC that does not name it (a runtime's CNI GC) leaves it", async () => {
    await startWithHostPort();
    const gone = namespaces.add();
    await d!.daemon.service.attach({ workloadId: 'stale', netnsPath: gone.path, ifName: 'eth0' });
    const result = await d!.daemon.service.gc([{ workloadId: 'pod' }]);
    expect(result.removed).to.deep.equal(['stale/eth0']);
    expect(await rowsOf()).to.deep.equal(['pod/eth0', KEY]);
    expect(hostPortCalls()).to.not.include('detach');
  });

  it('a forced leak sweep leaves it though its namespace path names nothing', async () => {
    await startWithHostPort();
    fs.rmSync(hostNs.path);
    for (let i = 0; i < 3; i++) {
      const swept = await d!.daemon.service.sweep(false);
      expect([...swept.released, ...swept.suspected]).to.not.include(KEY);
    }
    expect(await rowsOf()).to.deep.equal(['pod/eth0', KEY]);
    expect(hostPortCalls()).to.not.include('detach');
  });

  it("refuses a caller's Attach of its workload id and changes nothing", async () => {
    await startWithHostPort();
    const ns = namespaces.add();
    let err: Error | undefined;
    await d!.daemon.service
      .attach({ workloadId: 'workloadnet-host-port', netnsPath: ns.path, ifName: 'eth1' })
      .catch((e: Error) => (err = e));
    expect(err?.message).to.equal(
      "workload id workloadnet-host-port is the daemon's own host port (docs/fabric.md); use another id",
    );
    expect(await rowsOf()).to.deep.equal(['pod/eth0', KEY]);
  });
});

/** The host port's row as the controller records it (on the default network, no default route). */
function hostPortRow(netnsPath: string, netnsInode: number): AttachmentRecord {
  return {
    key: KEY,
    workloadId: 'workloadnet-host-port',
    ifName: 'wn-host0',
    netnsPath,
    netnsInode,
    ips: [{ family: 4, address: '10.77.0.200', gateway: '169.254.1.1' }],
    mtu: 1450,
    backend: 'recording',
    network: 'default',
    defaultRoute: false,
    routes: ['10.77.0.0/24'],
    origin: 'host-port',
    state: 'ready',
    createdAt: new Date().toISOString(),
    dataplane: { ifName: 'wn-host0', mac: '02:00:00:00:00:c8', mtu: 1450, routes: [] },
  };
}
