// What one flapping record costs a daemon with 1,000 peers: the fabric controller and the Linux
// dataplane in a node namespace of the fabric tests' underlay, given 1,000 VXLAN peers (nothing answers
// there; they are programmed all the same), then one record whose underlay address changes every
// 100 ms for a while. The figure is this process's CPU over that time (its own, and nft's, which it
// runs) as a share of one core. Figures are reported, never asserted: the machines are shared.
// Run alone with: node dist/test/bench/fabric-flap.bench.js [seconds]

import * as fs from 'node:fs';
import { FabricController } from '../../core/fabric/fabric-controller';
import type { Peer } from '../../core/peer-source';
import { silentLogger } from '../../core/logger';
import { LinuxFabric } from '../../backends/linux/fabric/linux-fabric';
import { FabricTopology, settings } from '../support/fabric-topology';
import { ManualPeerSource, until } from '../support/recording-fabric-dataplane';
import { netnsPath } from '../support/netns';
import type { FabricBenchRow } from './fabric.bench';
import { printRowsAndExit } from './bench-main';

const PEERS = 1000;
const FLAP_MS = 100;

function syntheticPeer(i: number, underlay = `10.120.${Math.floor(i / 250)}.${(i % 250) + 1}`): Peer {
  const p = 0x0a800000 + i * 64;
  const prefix = [p >>> 24, (p >>> 16) & 255, (p >>> 8) & 255, p & 255].join('.');
  const mac = ['0e', '78', (i >> 8).toString(16), (i & 255).toString(16), '00', '01'];
  return {
    node: `syn-${i}`,
    underlay: [underlay],
    mtu: 1500,
    vtep: { mac: mac.map((x) => x.padStart(2, '0')).join(':'), vni: 30574, port: 4789 },
    bootId: '',
    prefixes: [`${prefix}/26`],
  };
}

/** This process's CPU (ms), its children's (nft) included once they are reaped. */
function cpuMs(): number {
  const u = process.cpuUsage();
  const stat = fs.readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const children = (Number(f[13]) + Number(f[14])) * 10;
  return (u.user + u.system) / 1000 + children;
}

export async function benchFabricFlap(seconds = 20): Promise<FabricBenchRow[]> {
  const topo = new FabricTopology();
  let controller: FabricController | undefined;
  try {
    await topo.build([]);
    const node = await topo.addBareNode({ name: 'flap', subnet: 1, host: 1 });
    const dp = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false });
    const source = new ManualPeerSource();
    controller = new FabricController({
      settings: settings('vxlan'),
      nodeName: 'flap',
      bootId: 'boot-flap',
      source,
      dataplanes: [dp],
      backends: ['linux'],
      withdrawGraceMs: 180_000,
      log: silentLogger(),
    });
    await controller.start();
    await until(() => source.started !== undefined, 10_000, 'the record published');
    const peers = Array.from({ length: PEERS }, (_, i) => syntheticPeer(i));
    source.set(peers);
    await controller.applyNow();
    await until(() => controller?.status({ peers: false }).objects.fdb === PEERS, 60_000, 'peers programmed');
    const idle0 = cpuMs();
    await new Promise((r) => setTimeout(r, 3000));
    const idle = (cpuMs() - idle0) / 3000;
    const t0 = performance.now();
    const c0 = cpuMs();
    let flips = 0;
    const timer = setInterval(() => {
      flips++;
      const flapping = syntheticPeer(PEERS - 1, `10.121.0.${(flips % 2) + 1}`);
      source.set([...peers.slice(0, PEERS - 1), flapping]);
    }, FLAP_MS);
    await new Promise((r) => setTimeout(r, seconds * 1000));
    clearInterval(timer);
    await controller.applyNow();
    const share = (cpuMs() - c0) / (performance.now() - t0);
    return [
      { name: `${PEERS} peers, idle: CPU`, value: Math.round(idle * 1000) / 10, unit: '% of a core' },
      {
        name: `${PEERS} peers, one record flapping every ${FLAP_MS} ms: CPU`,
        value: Math.round(share * 1000) / 10,
        unit: '% of a core',
      },
      { name: 'record changes', value: flips, unit: '' },
    ];
  } finally {
    await controller?.stop();
    await topo.cleanup();
  }
}

if (require.main === module) {
  printRowsAndExit(benchFabricFlap(Number(process.argv[2] ?? 20)));
}
