import { expect } from 'chai';
import { DEFAULT_CONFIG } from '../../core/config';
import type { AttachChurn, ChurnCounts, ChurnWorkload } from '../support/attach-churn';
import { DaemonProcess, type DaemonProcessOptions } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { codeName } from '../support/grpc-outcome';
import { pings } from '../support/ping';
import { TortureRig } from '../support/torture-rig';
import { hostLinksInGroup, ipv4Addresses, routes } from '../support/kernel-view';
import { makeNodeNamespace } from './node-namespace';
import { scaled, TORTURE_KILLS, TORTURE_SEED } from './torture-settings';

// Attach/detach churn through the real daemon (Linux backend, in a test-owned node namespace) while
// the daemon is SIGKILLed at random moments, sometimes again during its start-up reconcile. After
// every restart the kernel and the store must agree: no address held twice, no host link in our group
// without its attachment, no attachment without its host link and workload interface, and every
// surviving workload reaches another one.

const GROUP = DEFAULT_CONFIG.linux.linkGroup;
const POOL = '10.254.0.0/24';
const WORKLOADS = scaled(16);
const WORKERS = 6;

interface Tally extends ChurnCounts {
  kills: number;
  killsDuringStartup: number;
  invariantChecks: number;
  pings: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describeRoot(
  'torture: linux backend under SIGKILL during attach/detach churn (root, test-owned namespaces)',
  function () {
    this.timeout(60_000 + TORTURE_KILLS * 10_000);
    const rig = new TortureRig<Tally>({
      name: 'torture-linux',
      seed: TORTURE_SEED,
      workers: WORKERS,
      tally: {
        kills: 0,
        killsDuringStartup: 0,
        attachOk: 0,
        attachFailed: 0,
        detachOk: 0,
        detachFailed: 0,
        invariantChecks: 0,
        pings: 0,
      },
    });
    const { rnd, tally } = rig;
    let node: string;

    const daemonOptions = (): DaemonProcessOptions => ({
      dir: rig.dir,
      netns: node,
      flags: { 'pod-cidr': POOL },
    });

    before(() => {
      rig.setUp('tl-', WORKLOADS);
      node = makeNodeNamespace(rig.namespaces);
    });

    after(() =>
      rig.tearDown(
        `${tally.kills} SIGKILLs survived (${tally.killsDuringStartup} during start-up reconcile)`,
        `${tally.invariantChecks} invariant checks, ${tally.pings} pings`,
      ),
    );

    /**
     * Workers attach and detach random workloads until stopped. A failure before that is a bug (every
     * workload always uses its own namespace, the pool is large enough); after it, the call was cut
     * off by the kill.
     */
    const churn = (d: DaemonProcess): AttachChurn =>
      rig.churn(d, {
        judgeFailure: (what, r, stopping) =>
          stopping ? undefined : `${what}: ${codeName(r.code)} ${r.details}`,
        judgeAttached: (what, res) =>
          res.ip.length === 1 ? undefined : `${what} returned ${res.ip.length} addresses`,
      });

    /** Starts a daemon on the same state and SIGKILLs it at a random moment of its start-up (reconcile). */
    async function killDuringStartup(): Promise<void> {
      const starting = DaemonProcess.launch(daemonOptions());
      await sleep(rnd.int(50, 700));
      await starting.kill('SIGKILL');
      tally.kills++;
      tally.killsDuringStartup++;
    }

    async function checkInvariants(d: DaemonProcess, round: number): Promise<void> {
      const where = `after kill ${round + 1} (seed ${TORTURE_SEED})`;
      const list = (await d.client.call(d.client.raw.list, {})).attachments;
      const status = await d.client.status();
      const keys = list.map((a) => `${a.workloadId}/${a.ifName}`);
      const addressOf = new Map(
        list.map((a) => [a.workloadId, (a.result?.ips[0]?.cidr ?? '').split('/')[0] ?? '']),
      );

      expect(status.reconcile, `${where}: reconcile ran`).to.not.equal(undefined);
      expect(
        list.filter((a) => a.state !== 'ready').map((a) => a.workloadId),
        `${where}: unfinished attachments survive reconcile`,
      ).to.deep.equal([]);
      tally.invariantChecks++;

      const addresses = [...addressOf.values()];
      expect(
        addresses.every((a) => a.startsWith('10.254.0.')),
        `${where}: addresses from the pool`,
      ).to.equal(true);
      expect(
        new Set(addresses).size,
        `${where}: an address is held twice in the store: ${addresses.join(' ')}`,
      ).to.equal(addresses.length);
      expect(status.pools[0]?.used, `${where}: pool usage matches the attachments`).to.equal(list.length);
      expect(status.attachments).to.equal(list.length);
      tally.invariantChecks++;

      const links = await hostLinksInGroup(node, GROUP);
      const aliases = links.map((l) => l.ifalias ?? '');
      for (const alias of aliases)
        expect(
          keys.map((k) => `workloadnet:${k}`),
          `${where}: host link ${alias} without its attachment`,
        ).to.include(alias);
      for (const k of keys)
        expect(aliases, `${where}: attachment ${k} without its host link`).to.include(`workloadnet:${k}`);
      expect(new Set(links.map((l) => l.ifname)).size).to.equal(links.length);
      tally.invariantChecks++;

      // Host routes: one per attached address, through that attachment's link, and none to a pool
      // address that no attachment holds (a leftover would steal a future workload's traffic).
      const poolRoutes = (await routes(node)).filter((r) => r.dst.startsWith('10.254.0.'));
      expect(poolRoutes.map((r) => r.dst).sort(), `${where}: host routes to pool addresses`).to.deep.equal(
        [...addresses].sort(),
      );
      tally.invariantChecks++;

      // Workload side: eth0 exists exactly when attached, and holds exactly the stored address.
      const seen = await Promise.all(
        rig.workloads.map(async (w) => ({ w, addrs: await ipv4Addresses(w.ns.name, 'eth0') })),
      );
      for (const { w, addrs } of seen) {
        const stored = addressOf.get(w.id);
        if (stored === undefined)
          expect(addrs, `${where}: ${w.id} is not attached but has eth0`).to.equal(undefined);
        else expect(addrs, `${where}: ${w.id} eth0 addresses`).to.deep.equal([`${stored}/32`]);
      }
      tally.invariantChecks++;

      // Traffic: each survivor reaches the next one around the ring.
      const attached = rig.workloads.filter((w) => addressOf.has(w.id));
      if (attached.length >= 2) {
        const results = await Promise.all(
          attached.map(async (w, i) => {
            const peer = attached[(i + 1) % attached.length] as ChurnWorkload;
            // ARP for the gateway may take a moment, hence the 3 s wait.
            const ok = await pings(w.ns.name, addressOf.get(peer.id) ?? '', { waitSeconds: 3 });
            return { from: w.id, to: peer.id, ok };
          }),
        );
        tally.pings += results.length;
        expect(
          results.filter((r) => !r.ok).map((r) => `${r.from} -> ${r.to}`),
          `${where}: workloads that cannot reach their peer`,
        ).to.deep.equal([]);
      }
      tally.invariantChecks++;
    }

    it(`keeps kernel and store consistent across ${TORTURE_KILLS} SIGKILLs during concurrent attach/detach churn`, async () => {
      const start = async (): Promise<DaemonProcess> =>
        (rig.daemon = await DaemonProcess.start(daemonOptions()));
      let daemon = await start();
      for (let round = 0; round < TORTURE_KILLS; round++) {
        const load = churn(daemon);
        await sleep(rnd.int(5, 400));
        load.stop();
        await daemon.kill('SIGKILL');
        tally.kills++;
        await load.done;
        expect(
          load.unexpected,
          `round ${round + 1}: calls that failed while the daemon was up`,
        ).to.deep.equal([]);
        // Now and then the restart itself is cut short, in the middle of reconciling the last crash.
        if (rnd.chance(0.25) && tally.kills < TORTURE_KILLS) {
          await killDuringStartup();
          round++;
        }
        daemon = await start();
        try {
          await checkInvariants(daemon, round);
        } catch (err) {
          (err as Error).message += `\ndaemon log tail:\n${daemon.log()}`;
          throw err;
        }
      }
      expect(tally.attachOk, 'the churn attached something').to.be.greaterThan(0);
      expect(tally.detachOk, 'the churn detached something').to.be.greaterThan(0);
    });
  },
);
