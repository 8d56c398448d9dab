import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { DpuBackend } from '../../../backends/dpu';
import type { Port } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { attachTo } from '../../support/attach-spec';
import { NetnsSet, addNodeUplink, ipJson, isRoot } from '../../support/netns';
import { expectCode, okAck, removeDir, scratchDir, spec, startBackend } from './fixtures';
import { RawAgent } from './raw-agent';

// A DPU agent is outside the host's trust: the netdev it names as a port's host end is moved into a
// workload only when it looks like a VF nobody on the host uses. Here a real gRPC client plays a rogue
// agent naming the node's uplink, its loopback, an addressed link, a routed link and another workload's
// link; each is refused before anything is touched, the node keeps its network, and the agent is told
// why in the Delete of the port.

const LINK_GROUP = 30574;

interface IpLink {
  ifname: string;
  flags: string[];
  address?: string;
}

(isRoot ? describe : describe.skip)(
  'DPU backend: a rogue agent cannot take host interfaces (root)',
  function () {
    this.timeout(30_000);
    const spaces = new NetnsSet('wn-rogue-');
    let node: { name: string; path: string };
    let workload: { name: string; path: string };
    let dir: string;
    let backend: DpuBackend;
    let agent: RawAgent;
    let n = 0;

    const ip = (...args: string[]): void => void execFileSync('ip', ['-n', node.name, ...args]);

    before(() => {
      node = spaces.add();
      workload = spaces.add();
      addNodeUplink(node.name, '10.99.0.1');
    });

    after(() => spaces.cleanup());

    beforeEach(async () => {
      dir = scratchDir();
      backend = await startBackend(dir, {
        hostNetnsPath: node.path,
        linuxLinkGroups: [LINK_GROUP, LINK_GROUP + 1],
        ackTimeoutMs: 3000,
      });
      agent = new RawAgent(path.join(dir, 'agent.sock'));
      agent.send(
        RawAgent.hello('dpu-rogue', {
          capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: ['host-endpoint'] },
        }),
      );
      await agent.next((m) => !!m.syncComplete, 'the (empty) snapshot');
    });

    afterEach(async () => {
      agent.close();
      await backend.stop();
      removeDir(dir);
    });

    /**
     * Attaches one port and has the agent ack it with the netdev `endpoint` names (after setting it up);
     * returns the attach, the port sent, and the node's state right before the ack.
     */
    async function attachAckedAs(
      endpoint: (port: Port) => string,
    ): Promise<{ result: Promise<unknown>; port: Port; before: unknown }> {
      n++;
      const from = agent.received.length;
      const s = { ...spec(n), netnsPath: workload.path, netnsInode: fs.statSync(workload.path).ino };
      const result = attachTo(backend, s);
      result.catch(() => undefined);
      const up = await agent.next((m) => !!m.upsert, 'the upsert', 5000, from);
      const port = up.upsert!.port!;
      const netdev = endpoint(port);
      const before = nodeState();
      agent.send(okAck(port.name, port.generation, { endpoint: { netdev, mac: port.mac } }));
      return { result, port, before };
    }

    async function expectRefused(endpoint: string, why: RegExp, name = (_: Port) => endpoint): Promise<void> {
      const { result, port, before } = await attachAckedAs(name);
      const err = await expectCode(result, 'FAILED_PRECONDITION');
      expect(err.message).to.match(new RegExp(`reported ${endpoint} as the host end`));
      expect(err.message).to.match(why);
      expect(nodeState(), 'the node namespace is untouched').to.deep.equal(before);
      expect(linkNames(workload.name)).to.deep.equal(['lo']);
      const del = await agent.next((m) => m.delete?.name === port.name, 'the Delete of the refused port');
      expect(del.delete?.reason).to.match(why);
    }

    function linkNames(ns: string): string[] {
      return ipJson<IpLink[]>(ns, ['link', 'show'])
        .map((l) => l.ifname)
        .sort();
    }

    /** Links with their flags, addresses and routes of the node: what a refused attach must not change. */
    function nodeState(): unknown {
      return {
        links: ipJson<IpLink[]>(node.name, ['link', 'show']).map((l) => [l.ifname, l.flags.includes('UP')]),
        addrs: ipJson<unknown[]>(node.name, ['addr', 'show']),
        routes: ipJson<unknown[]>(node.name, ['route', 'show']),
      };
    }

    it("refuses the node's uplink, which keeps its address, its state and the default route", async () => {
      await expectRefused('up0', /carries MAC|carries address/);
      const [up0] = ipJson<IpLink[]>(node.name, ['link', 'show', 'dev', 'up0']);
      expect(up0?.flags).to.include('UP');
      expect(ipJson<Array<{ dst: string }>>(node.name, ['route', 'show']).map((r) => r.dst)).to.include(
        'default',
      );
    });

    it('refuses the loopback interface and leaves it up', async () => {
      await expectRefused('lo', /loopback/);
      expect(ipJson<IpLink[]>(node.name, ['link', 'show', 'dev', 'lo'])[0]?.flags).to.include('UP');
    });

    it("refuses a link carrying the port's MAC but an address", async () => {
      await expectRefused('vfaddr0', /carries address 10\.98\.0\.7\/32/, (port) => {
        ip('link', 'add', 'vfaddr0', 'address', port.mac, 'type', 'veth', 'peer', 'name', 'vfaddr1');
        ip('addr', 'add', '10.98.0.7/32', 'dev', 'vfaddr0');
        return 'vfaddr0';
      });
    });

    it("refuses a link carrying the port's MAC that is the device of a route", async () => {
      await expectRefused('vfroute0', /device of route 10\.97\.0\.0\/24/, (port) => {
        ip('link', 'add', 'vfroute0', 'address', port.mac, 'type', 'veth', 'peer', 'name', 'vfroute1');
        ip('link', 'set', 'vfroute0', 'up');
        ip('link', 'set', 'vfroute1', 'up');
        ip('-6', 'addr', 'flush', 'dev', 'vfroute0');
        ip('route', 'add', '10.97.0.0/24', 'dev', 'vfroute0');
        return 'vfroute0';
      });
    });

    it("refuses another workload's host link (in workloadnet's link group)", async () => {
      await expectRefused('wnother0', /link group 30574/, (port) => {
        ip(
          'link',
          'add',
          'wnother0',
          'address',
          port.mac,
          'group',
          String(LINK_GROUP),
          'type',
          'veth',
          'peer',
          'name',
          'wnother1',
        );
        return 'wnother0';
      });
    });

    it("moves a VF that carries the port's MAC and nothing of the host's", async () => {
      let vf = '';
      const { result } = await attachAckedAs((port) => {
        vf = `vfok${n}`;
        ip('link', 'add', vf, 'address', port.mac, 'type', 'veth', 'peer', 'name', `vfpeer${n}`);
        return vf;
      });
      await result;
      expect(linkNames(workload.name)).to.include('eth0');
      expect(linkNames(node.name)).to.not.include(vf);
    });
  },
);
