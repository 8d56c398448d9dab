import { expect } from 'chai';
import type { CompiledPolicy, PodPolicy } from '../../../../core/policy-dataplane';
import { HostPolicy } from '../../../../backends/linux/policy/host-policy';
import { NetnsSet, type TestNamespace } from '../../../support/netns';
import { describeRoot } from '../../../support/describe-root';
import { requireProgram } from '../../../support/system-program';
import { waitUntil } from '../../../support/wait-until';
import { nftIn } from '../../../support/netns-nft';

// Drift heard from the kernel: our policy table changed by someone else (nft by hand) is put back
// (in ~0.3 s here), with no periodic recheck at all (the repair is the drift callback alone),
// while our own applies and other tables' changes cause no read of the table.

const TABLE = 'inet workloadnet_policy';
/** Longer than the monitor's debounce and its thread's lag, for "nothing happened" to mean something. */
const QUIET_MS = 600;

function pod(name: string, n: number, sets: string[]): PodPolicy {
  return {
    key: `${name}/eth0`,
    pod: `ns/${name}`,
    hostIf: `p${name}`,
    ips: [`10.78.${n}.5`],
    ingress: { rules: [{ sets, ports: [{ protocol: 'TCP', port: 80 }] }] },
    policies: ['ns/policy'],
  };
}

/** Pods a and b (sharing one chain) and c, whose allowed peers are the sets `web` and `db` (`cSets`). */
function program(web: string[], db: string[], cSets = ['db']): CompiledPolicy {
  const pods = [pod('a', 1, ['web']), pod('b', 2, ['web']), pod('c', 3, cSets)];
  return {
    sets: new Map([
      ['web', web],
      ['db', db],
    ]),
    pods: new Map(pods.map((p) => [p.key, p])),
  };
}

/** The table as nft prints it, without counters (they move with traffic, not with drift). */
function listing(ns: TestNamespace): string {
  return nftIn(ns.name, `list table ${TABLE}\n`).replace(/packets \d+ bytes \d+/g, '');
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describeRoot(
  'Linux backend: NetworkPolicy drift heard from nf_tables (root, test-owned namespaces)',
  function () {
    this.timeout(60_000);
    const nss = new NetnsSet('wnpd-');
    let node: TestNamespace;
    let policy: HostPolicy;
    let inForce: CompiledPolicy;
    let repairs: number;

    before(() => requireProgram('nft'));

    beforeEach(async () => {
      node = nss.add('node');
      policy = new HostPolicy(node.path);
      repairs = 0;
      // What the controller's wiring does: the enforcement loop's recheck, i.e. an apply of the program in force.
      policy.onDrift(() => {
        repairs++;
        void policy.apply(inForce).catch(() => undefined);
      });
      inForce = program(['10.78.9.1/32', '10.78.9.2/32'], ['10.78.9.3/32']);
      await policy.apply(inForce);
      // The monitor starts with the table (its socket in the group before start() returns).
      await waitUntil(() => policy.monitoring, 'the drift monitor running');
    });

    afterEach(async () => {
      await policy.close();
      nss.cleanup();
    });

    async function putBack(drift: string, what: string): Promise<void> {
      const want = listing(node);
      const reads = await policy.reads();
      nftIn(node.name, drift);
      expect(listing(node), 'the drift took effect').to.not.equal(want);
      // No recheck runs in these tests: whatever puts it back is the monitor (it takes ~0.3 s here; the
      // bound only keeps a broken monitor from hanging the suite).
      await waitUntil(() => listing(node) === want, `${what} put back`, 10_000);
      expect(policy.driftsHeard, 'drift heard').to.be.greaterThan(0);
      expect(await policy.reads(), 'read back once').to.equal(reads + 1);
    }

    it('hears a rule flushed by hand from a pod chain, and puts it back', async () => {
      const chain = /chain (pi_[0-9a-f]+) \{/.exec(listing(node))?.[1];
      expect(chain, 'an ingress chain').to.be.a('string');
      await putBack(`flush chain ${TABLE} ${chain ?? '?'}\n`, 'the flushed chain');
    });

    it('hears an element deleted by hand from an address set, and puts it back', async () => {
      const set = /set (s_[0-9a-f]+_v4) \{[^}]*elements = \{ 10\.78\.9\.1/.exec(listing(node))?.[1];
      expect(set, 'the set of web').to.be.a('string');
      await putBack(`delete element ${TABLE} ${set ?? '?'} { 10.78.9.1 }\n`, 'the deleted address');
    });

    it('hears an element deleted by hand from the ingress verdict map, and puts it back', async () => {
      const map = /map (\w+) \{[^}]*type ifname : verdict[^}]*"pb"/.exec(listing(node))?.[1];
      expect(map, 'the ingress map').to.be.a('string');
      await putBack(`delete element ${TABLE} ${map ?? '?'} { "pb" }\n`, 'the deleted map element');
    });

    it('reads nothing back after fifty label changes of its own', async () => {
      const reads = await policy.reads();
      for (let i = 0; i < 50; i++) {
        // A label change: one address moves between web and db (elements only, over netlink), and every
        // tenth a new pod chain (through libnftables).
        const moved = `10.78.10.${i}/32`;
        const [web, db] = i % 2 ? [[moved], []] : [[], [moved]];
        const cSets = Math.floor(i / 10) % 2 ? ['db', 'web'] : ['db'];
        inForce = program(['10.78.9.1/32', ...web], ['10.78.9.3/32', ...db], cSets);
        await policy.apply(inForce);
      }
      await sleep(QUIET_MS);
      expect(policy.driftsHeard, 'drift heard').to.equal(0);
      expect(repairs, 'repairs asked for').to.equal(0);
      expect(await policy.reads(), 'reads of the table').to.equal(reads);
    });

    it('reads nothing back when another tool changes another table', async () => {
      const reads = await policy.reads();
      nftIn(
        node.name,
        'add table inet other\nadd chain inet other input { type filter hook input priority 0; }\n' +
          'add set inet other s { type ipv4_addr; }\nadd element inet other s { 10.0.0.1 }\n' +
          'add rule inet other input ip saddr @s counter\n',
      );
      nftIn(node.name, 'flush chain inet other input\ndelete table inet other\n');
      await sleep(QUIET_MS);
      expect(policy.driftsHeard, 'drift heard').to.equal(0);
      expect(await policy.reads(), 'reads of the table').to.equal(reads);
    });
  },
);
