import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AttachResponse } from '../../proto/gen/workloadnet/v1/workload';
import { waitUntil } from '../support/wait-until';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { linuxHostLinks } from '../support/kernel-view';
import { addNodeUplink, ipJson, NetnsSet } from '../support/netns';
import { describeRoot } from '../support/describe-root';
import { pings } from '../support/ping';

// Two dual-stack networks on the one Linux backend: the backend is built once and serves both, each
// network allocates from its own pools, and an interface without the default route gets its network's
// IPv4 and IPv6 ranges routed through the link-local gateways instead.

const address = (res: AttachResponse, family: 4 | 6): string =>
  (res.ips.find((i) => i.family === family)?.cidr ?? '').split('/')[0] ?? '';

describeRoot(
  'networks: two dual-stack networks on one Linux backend (root, test-owned namespaces)',
  function () {
    this.timeout(60_000);
    const namespaces = new NetnsSet(`wn-net-l${process.pid}-`);
    let dir: string;
    let node: string;
    let daemon: DaemonProcess;

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-net-'));
      node = namespaces.add().name;
      addNodeUplink(node, '10.250.0.1');
      const networks = [
        { name: 'default', backend: 'linux', podCidrs: ['10.246.10.0/24', 'fd00:246:10::/64'] },
        { name: 'storage', backend: 'linux', podCidrs: ['10.246.20.0/24', 'fd00:246:20::/64'] },
      ];
      daemon = await DaemonProcess.start({ dir, netns: node, config: { networks } });
      await waitUntil(async () => (await daemon.client.status()).ready, 'ready', 10_000);
    });

    after(async () => {
      await daemon?.stop();
      namespaces.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it('routes the storage network through net1 for both families, the default route through eth0 only', async () => {
      const w = namespaces.add();
      const peer = namespaces.add();
      const eth0 = await daemon.client.call(daemon.client.raw.attach, attachRequest('nl-w', w.path, 'eth0'));
      const net1 = await daemon.client.call(
        daemon.client.raw.attach,
        attachRequest('nl-w', w.path, 'net1', { network: 'storage' }),
      );
      const p = await daemon.client.call(
        daemon.client.raw.attach,
        attachRequest('nl-peer', peer.path, 'eth0', { network: 'storage' }),
      );
      expect(address(eth0, 4)).to.match(/^10\.246\.10\./);
      expect(address(eth0, 6)).to.match(/^fd00:246:10::/);
      expect(address(net1, 4)).to.match(/^10\.246\.20\./);
      expect(address(net1, 6)).to.match(/^fd00:246:20::/);
      expect(net1.routes.map((r) => r.destination)).to.have.members([
        '169.254.1.1/32',
        '10.246.20.0/24',
        'fd00:246:20::/64',
      ]);

      const v6 = ipJson<Array<{ dst: string; gateway?: string; dev: string }>>(w.name, [
        '-6',
        'route',
        'show',
      ]);
      expect(v6.filter((r) => r.dst === 'default').map((r) => r.dev)).to.deep.equal(['eth0']);
      expect(
        v6.some((r) => r.dst === 'fd00:246:20::/64' && r.dev === 'net1' && r.gateway === 'fe80::1'),
      ).to.equal(true);
      const v4 = ipJson<Array<{ dst: string; dev: string }>>(w.name, ['-4', 'route', 'show']);
      expect(v4.filter((r) => r.dst === 'default').map((r) => r.dev)).to.deep.equal(['eth0']);

      // The peer is on storage only: it has storage's routes and no default route at all.
      expect(
        ipJson<Array<{ dst: string }>>(peer.name, ['route', 'show']).some((r) => r.dst === 'default'),
      ).to.equal(false);
      expect(await pings(peer.name, address(net1, 4)), 'IPv4 peer -> net1').to.equal(true);
      expect(await pings(peer.name, address(net1, 6)), 'IPv6 peer -> net1').to.equal(true);
      expect(await pings(w.name, address(p, 6), { from: 'net1' }), 'IPv6 net1 -> peer').to.equal(true);

      // One backend, three host links (one per attachment) in its group.
      expect(await linuxHostLinks(node)).to.have.length(3);
      const check = await daemon.client.call(daemon.client.raw.check, { workloadId: 'nl-w', ifName: 'net1' });
      expect(check.drift).to.deep.equal([]);
      // A route of the network removed behind the daemon's back is drift Check names.
      execFileSync('ip', ['-n', w.name, 'route', 'del', '10.246.20.0/24', 'dev', 'net1']);
      const drift = await daemon.client.call(daemon.client.raw.check, { workloadId: 'nl-w', ifName: 'net1' });
      expect(drift.drift.map((d) => d.message)).to.deep.equal([
        'route to 10.246.20.0/24 via 169.254.1.1 dev net1 is missing',
      ]);
      const st = await daemon.client.status();
      expect(st.networks.map((n) => `${n.name}:${n.backend}:${n.attachments}`)).to.deep.equal([
        'default:linux:1',
        'storage:linux:2',
      ]);
    });
  },
);
