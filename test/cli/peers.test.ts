import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ApiClient } from '../../cli/api-client';
import { expectHelpSnapshot, runCliAsync } from '../support/cli-run';
import { InProcessDaemon } from '../support/in-process-daemon';
import { RecordingBackend } from '../support/recording-backend';
import { RecordingFabricDataplane, until } from '../support/recording-fabric-dataplane';

// `workloadnet peers` and the fabric in `status`, against a daemon in this process whose backend offers
// a recording fabric dataplane, with the static peer source reading a file.

const PEERS = {
  peers: [
    {
      node: 'self-node',
      underlay: ['192.0.2.1'],
      vtep: { mac: '0e:77:c0:00:02:01' },
      prefixes: ['10.77.0.0/24'],
    },
    {
      node: 'n2',
      underlay: ['192.0.2.2'],
      vtep: { mac: '0e:77:c0:00:02:02' },
      prefixes: ['10.244.2.0/24', 'fd00:244:2::/64'],
    },
    { node: 'n3', underlay: ['198.51.100.3'], prefixes: ['10.244.3.0/24'] },
  ],
};

describe('workloadnet peers', () => {
  it('prints the same --help as its snapshot, with examples', () => expectHelpSnapshot(['peers']));

  describe('against a daemon with the fabric on', () => {
    let d: InProcessDaemon;
    let dp: RecordingFabricDataplane;
    let peersFile: string;
    const sock = (): string[] => ['--socket', d.config.socket];

    before(async () => {
      const dir = InProcessDaemon.tempDir();
      peersFile = path.join(dir, 'peers.json');
      fs.writeFileSync(peersFile, JSON.stringify(PEERS));
      dp = new RecordingFabricDataplane();
      const backend = Object.assign(new RecordingBackend(), { fabric: dp });
      d = await InProcessDaemon.start(
        backend,
        // An MTU set above what VXLAN carries: kept, and warned of.
        { nodeName: 'self-node', mtu: 1500, fabric: { mode: 'vxlan', peersFile } },
        { dir },
      );
      await until(() => dp.applied.length > 0, 10_000, 'the first apply');
    });
    after(async () => {
      await d.dispose();
    });

    it('lists every peer but this node, with its path, prefixes and why it is unreachable, and counts the unreachable', async () => {
      const r = await runCliAsync(['peers', ...sock()]);
      expect(r.code, r.stderr).to.equal(0);
      // n3 has no VTEP: "ready, 2 peers" alone would hide that one of them is not reached.
      expect(r.stdout).to.match(/^fabric:\s+vxlan, ready, 2 peers: 1 reachable, 1 unreachable\n/);
      expect(r.stdout).to.match(
        /this node:\s+self-node 192\.0\.2\.1 \(uplink eth0, mtu 1500, pod mtu 1450\)/,
      );
      expect(r.stdout).to.match(/source:\s+static \(synced, connected\)/);
      expect(r.stdout).to.include(
        'warning:   network default: mtu 1500 is larger than the vxlan fabric carries (1450); set its mtu to 1450 or less, or to 0 (auto)',
      );
      expect(r.stdout).to.match(/programmed:\s+3 routes, 2 neighbours, 2 fdb entries; 0 repairs/);
      const lines = r.stdout.split('\n');
      const header = lines.findIndex((l) => l.startsWith('NODE'));
      expect(lines[header]).to.match(/^NODE\s+UNDERLAY\s+PATH\s+PREFIXES\s+PROBE\s+RTT\s+CHANGED\s+REASON$/);
      // The recording dataplane does not probe: no probe, no round trip.
      expect(lines[header + 1]).to.match(
        /^n2\s+192\.0\.2\.2\s+vxlan\s+10\.244\.2\.0\/24,fd00:244:2::\/64\s+-\s+-\s+\d+s ago\s+-$/,
      );
      expect(lines[header + 2]).to.match(
        /^n3\s+198\.51\.100\.3\s+unreachable\s+10\.244\.3\.0\/24\s+-\s+-\s+\d+s ago\s+the peer has no VTEP$/,
      );
      expect(r.stdout).to.not.include('self-node   ');
    });

    it('Status leaves the peer rows out when asked (omit_fabric_peers), every count kept', async () => {
      const client = new ApiClient(d.config.socket);
      try {
        const all = await client.status();
        const summary = await client.status({ omitFabricPeers: true });
        expect(all.fabric?.peers.map((p) => p.node)).to.deep.equal(['n2', 'n3']);
        expect(summary.fabric?.peers).to.deep.equal([]);
        expect(summary.fabric).to.include({ mode: 'vxlan', ready: true, routes: 3, neighbours: 2, fdb: 2 });
        expect(
          [all.fabric?.peerCount, summary.fabric?.peerCount],
          'the rows counted either way',
        ).to.deep.equal([2, 2]);
      } finally {
        client.close();
      }
    });

    it("shows how this node's DPUs see a peer as they say it now, between applies", async () => {
      dp.seen = new Map([
        [
          'n2',
          [
            {
              endpoint: 'dpu-a',
              reachable: true,
              offloaded: true,
              txPackets: 12,
              rxPackets: 34,
              lastError: '',
            },
          ],
        ],
      ]);
      try {
        const r = await runCliAsync(['peers', ...sock()]);
        expect(r.code, r.stderr).to.equal(0);
        expect(r.stdout).to.include('n2: seen by dpu-a: reachable, offloaded, tx 12 rx 34 packets');
      } finally {
        dp.seen = undefined;
      }
    });

    it('--json prints the Status API’s fabric', async () => {
      const r = await runCliAsync(['peers', '--json', ...sock()]);
      expect(r.code).to.equal(0);
      const f = JSON.parse(r.stdout) as {
        mode: string;
        ready: boolean;
        podMtu: number;
        peers: Array<{ node: string; path: string; prefixes: string[]; lastChange: string }>;
      };
      expect(f).to.include({ mode: 'vxlan', ready: true, podMtu: 1450 });
      expect(f.peers.map((p) => [p.node, p.path])).to.deep.equal([
        ['n2', 'vxlan'],
        ['n3', 'unreachable'],
      ]);
      expect(Number.isNaN(Date.parse(f.peers[0]?.lastChange ?? ''))).to.equal(false);
    });

    it("shows the VXLAN source filter's drop counter (and --json carries it); no line without a filter", async () => {
      expect((await runCliAsync(['peers', ...sock()])).stdout).to.not.include('filtered:');
      dp.filteredPackets = 7;
      try {
        const r = await runCliAsync(['peers', ...sock()]);
        expect(r.stdout).to.include('filtered:    7 packets dropped by the source filter\n');
        const j = JSON.parse((await runCliAsync(['peers', '--json', ...sock()])).stdout) as {
          filteredPackets?: number;
        };
        expect(j.filteredPackets).to.equal(7);
      } finally {
        dp.filteredPackets = undefined;
      }
    });

    it('status shows the fabric line, and a refused peers file as its reason, without losing readiness', async () => {
      const st = await runCliAsync(['status', ...sock()]);
      expect(st.code).to.equal(0);
      expect(st.stdout).to.match(
        /fabric:\s+vxlan, ready, 2 peers: 1 reachable, 1 unreachable \(workloadnet peers\)/,
      );
      fs.writeFileSync(`${peersFile}.tmp`, '{"peers":[{"node":"n2"}]}');
      fs.renameSync(`${peersFile}.tmp`, peersFile);
      let out = '';
      for (let i = 0; i < 100 && !out.includes('peers[0].underlay'); i++) {
        out = (await runCliAsync(['peers', ...sock()])).stdout;
        if (!out.includes('peers[0].underlay')) await new Promise((r) => setTimeout(r, 100));
      }
      expect(out).to.include(`peers file ${peersFile}: peers[0].underlay must be a non-empty list`);
      expect(out, 'the table read before stays').to.match(/^n2\s/m);
      expect(out, 'still ready: the table programmed is the last good one').to.match(
        /^fabric:\s+vxlan, ready, /,
      );
      fs.writeFileSync(peersFile, JSON.stringify(PEERS));
    });

    it('exports the fabric gauges', async () => {
      await d.client.status();
      const text = await d.metrics.registry.metrics();
      expect(text).to.match(/workloadnet_fabric_ready 1/);
      expect(text).to.match(/workloadnet_fabric_peers\{path="vxlan"\} 1/);
      expect(text).to.match(/workloadnet_fabric_objects\{kind="fdb"\} 2/);
    });
  });

  describe('against a daemon with the fabric off', () => {
    let d: InProcessDaemon;
    before(async () => {
      d = await InProcessDaemon.start(new RecordingBackend());
    });
    after(async () => {
      await d.dispose();
    });

    it('says the fabric is off and exits 0', async () => {
      const r = await runCliAsync(['peers', '--socket', d.config.socket]);
      expect(r.code).to.equal(0);
      expect(r.stdout).to.equal('the fabric is off (daemon --fabric, config fabric.mode)\n');
      const st = await runCliAsync(['status', '--socket', d.config.socket]);
      expect(st.stdout).to.not.include('fabric:');
    });
  });
});
