import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { DpuBackend } from '../../../backends/dpu';
import { LinkState, type AgentMessage, type Port } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import type { DataplaneResult } from '../../../core/backend';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { attachTo, type TestSpec } from '../../support/attach-spec';
import { NetnsSet, addNodeUplink, ipJson, type IpLink } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import {
  expectCode,
  okAck,
  removeDir,
  scratchDir,
  spec,
  startBackend,
  view,
} from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { waitUntil } from '../../support/sim-process';

// A DPU agent is outside the host's trust: the netdev it names as a port's host end is moved into a
// workload only when it looks like a VF nobody on the host uses. Here a real gRPC client plays a rogue
// agent naming the node's uplink, its loopback, an addressed link, a routed link and another workload's
// link; each is refused before anything is touched, the node keeps its network, and the agent is told
// why in the Delete of the port.

const LINK_GROUP = 30574;

/**
 * The refused port's Delete says why, and the Attach fails only once the agent has confirmed it: an
 * agent that programmed the port answers, and a failed Attach leaves none of its VFs behind.
 */
async function refusedOnceDeleted(
  a: RawAgent,
  port: Port,
  result: Promise<unknown>,
  why: RegExp,
): Promise<Error> {
  const del = await a.next((m) => m.delete?.name === port.name, 'the Delete of the refused port');
  expect(del.delete?.reason).to.match(why);
  const early = await Promise.race([
    result.then(
      () => 'resolved',
      () => 'failed',
    ),
    new Promise<string>((r) => setTimeout(() => r('pending'), 150)),
  ]);
  expect(early, 'the Attach waits for the agent to confirm the deletion').to.equal('pending');
  a.send(okAck(port.name, del.delete!.generation));
  return expectCode(result, 'FAILED_PRECONDITION');
}

interface NodeSpaces {
  node: { name: string; path: string };
  workload: { name: string; path: string };
}

/** A node namespace with its uplink and a workload namespace beside it, for all the tests of a suite. */
function nodeAndWorkload(prefix: string): NodeSpaces {
  const set = new NetnsSet(prefix);
  const made = {} as NodeSpaces;
  before(() => {
    made.node = set.add();
    made.workload = set.add();
    addNodeUplink(made.node.name, '10.99.0.1');
  });
  after(() => set.cleanup());
  return made;
}

describeRoot('DPU backend: a rogue agent cannot take host interfaces (root)', function () {
  this.timeout(30_000);
  const spaces = nodeAndWorkload('wn-rogue-');
  let dir: string;
  let backend: DpuBackend;
  let agent: RawAgent;
  let n = 0;

  const ip = (...args: string[]): void => void execFileSync('ip', ['-n', spaces.node.name, ...args]);

  beforeEach(async () => {
    dir = scratchDir();
    backend = await startBackend(dir, {
      hostNetnsPath: spaces.node.path,
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
    // The tests are about what the agent says, not about its silence (600 ms ends a session).
    agent.keepAlive(100);
  });

  afterEach(async () => {
    agent.close();
    await backend.stop();
    removeDir(dir);
  });

  /**
   * Attaches one port and has the agent ack it with the netdev `endpoint` names (after setting it up);
   * returns the attach, the port sent, its spec, and the node's state right before the ack.
   */
  async function attachAckedAs(
    endpoint: (port: Port) => string,
    over: Partial<TestSpec> = {},
  ): Promise<{ result: Promise<unknown>; port: Port; before: unknown; s: TestSpec }> {
    n++;
    const from = agent.received.length;
    const s = {
      ...spec(n, over),
      netnsPath: spaces.workload.path,
      netnsInode: fs.statSync(spaces.workload.path).ino,
    };
    const result = attachTo(backend, s);
    result.catch(() => undefined);
    const up = await agent.next((m) => !!m.upsert, 'the upsert', 5000, from);
    const port = up.upsert!.port!;
    const netdev = endpoint(port);
    const before = nodeState();
    agent.send(
      okAck(port.name, port.generation, {
        endpoint: { netdev, mac: port.mac, pciAddress: '', representor: '' },
      }),
    );
    return { result, port, before, s };
  }

  async function expectRefused(endpoint: string, why: RegExp, name = (_: Port) => endpoint): Promise<void> {
    const { result, port, before } = await attachAckedAs(name);
    const err = await refusedOnceDeleted(agent, port, result, why);
    expect(err.message).to.match(new RegExp(`reported ${endpoint} as the host end`));
    expect(err.message).to.match(why);
    expect(nodeState(), 'the node namespace is untouched').to.deep.equal(before);
    expect(linkNames(spaces.workload.name)).to.deep.equal(['lo']);
  }

  function linkNames(ns: string): string[] {
    return ipJson<IpLink[]>(ns, ['link', 'show'])
      .map((l) => l.ifname)
      .sort();
  }

  /** Links with their flags, addresses and routes of the node: what a refused attach must not change. */
  function nodeState(): unknown {
    return {
      links: ipJson<IpLink[]>(spaces.node.name, ['link', 'show']).map((l) => [
        l.ifname,
        l.flags.includes('UP'),
      ]),
      // Duplicate address detection ends on its own a second or two after a link comes up: an address
      // losing its "tentative" mark meanwhile is no change the attach made.
      addrs: ipJson<Array<{ addr_info?: Array<Record<string, unknown>> }>>(spaces.node.name, [
        'addr',
        'show',
      ]).map((l) => ({ ...l, addr_info: l.addr_info?.map((a) => ({ ...a, tentative: undefined })) })),
      routes: ipJson<unknown[]>(spaces.node.name, ['route', 'show']),
    };
  }

  it("refuses the node's uplink, which keeps its address, its state and the default route", async () => {
    await expectRefused('up0', /carries MAC|carries address/);
    const [up0] = ipJson<IpLink[]>(spaces.node.name, ['link', 'show', 'dev', 'up0']);
    expect(up0?.flags).to.include('UP');
    expect(ipJson<Array<{ dst: string }>>(spaces.node.name, ['route', 'show']).map((r) => r.dst)).to.include(
      'default',
    );
  });

  it('refuses the loopback interface and leaves it up', async () => {
    await expectRefused('lo', /loopback/);
    expect(ipJson<IpLink[]>(spaces.node.name, ['link', 'show', 'dev', 'lo'])[0]?.flags).to.include('UP');
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
    expect(linkNames(spaces.workload.name)).to.include('eth0');
    expect(linkNames(spaces.node.name)).to.not.include(vf);
  });

  it("keeps a port's endpoint when the ack of an MTU change names the node's uplink, and leaves the workload's link as it was", async () => {
    let vf = '';
    // Its own interface name: an earlier test leaves its eth0 in the workload.
    const { result, port, s } = await attachAckedAs(
      (p) => {
        vf = `vfmtu${n}`;
        ip('link', 'add', vf, 'address', p.mac, 'type', 'veth', 'peer', 'name', `vfmtp${n}`);
        return vf;
      },
      { ifName: 'net9' },
    );
    const r = (await result) as DataplaneResult;
    const ns = await NetnsHandle.open(spaces.workload.path);
    try {
      const from = agent.received.length;
      // Growing: the agent's end first, so its ack comes before the workload's link is touched.
      const changing = backend.setMtu(view(s, r), ns, 9000);
      const up = await agent.next((m) => m.upsert?.port?.mtu === 9000, 'the MTU upsert', 5000, from);
      agent.send(
        okAck(port.name, up.upsert!.port!.generation, {
          endpoint: { netdev: 'up0', mac: port.mac, pciAddress: '', representor: '' },
        }),
      );
      await expectCode(changing, 'DEADLINE_EXCEEDED');
    } finally {
      ns.close();
    }
    const net9 = ipJson<Array<{ mtu: number }>>(spaces.workload.name, ['link', 'show', 'dev', 'net9'])[0];
    expect(net9?.mtu, "the workload's link keeps its MTU").to.equal(1500);
    // Detach hands back the VF it moved in, never the uplink the lying ack named.
    const from = agent.received.length;
    const detaching = backend.detach(view(s, r));
    const del = await agent.next((m) => m.delete?.name === port.name, 'the Delete', 5000, from);
    agent.send(okAck(port.name, del.delete!.generation));
    await detaching;
    expect(linkNames(spaces.node.name)).to.include.members([vf, 'up0']);
    expect(linkNames(spaces.workload.name)).to.not.include('net9');
    const [up0] = ipJson<IpLink[]>(spaces.node.name, ['link', 'show', 'dev', 'up0']);
    expect(up0?.flags).to.include('UP');
  });
});

// From protocol version 2 an agent also has to name a VF of its own: one its inventory lists, with the
// PF and VF index the inventory gives it. A netdev that would pass the host guard but is no listed VF,
// another agent's VF, and any endpoint of an agent that sent no inventory are refused the same way:
// nothing moved, the port's Delete says why.
describeRoot('DPU backend: a version 2 agent hands over only VFs its inventory lists (root)', function () {
  this.timeout(30_000);
  const spaces = nodeAndWorkload('wn-fleet-rogue-');
  let dir: string;
  let backend: DpuBackend;
  const agents = new Map<string, RawAgent>();
  let beat: NodeJS.Timeout | undefined;
  let n = 100;

  const ip = (...args: string[]): void => void execFileSync('ip', ['-n', spaces.node.name, ...args]);
  const features = ['host-endpoint'];

  function inventory(pfName: string, vfs: string[]): AgentMessage {
    return {
      inventory: {
        firmwareVersion: 'fw',
        agentVersion: 'raw',
        pfs: [
          {
            index: 0,
            name: pfName,
            pciAddress: '0000:30:00.0',
            linkState: LinkState.LINK_STATE_UP,
            speedMbps: 25_000,
            mtu: 9000,
            vfTotal: vfs.length,
            vfFree: vfs.length,
            vfs: vfs.map((netdev, index) => ({ index, netdev, pciAddress: `0001:40:00.${index}` })),
          },
        ],
      },
    };
  }

  async function connect(agentId: string, inv: AgentMessage | undefined): Promise<RawAgent> {
    const a = new RawAgent(path.join(dir, 'agent.sock'));
    a.send(
      RawAgent.hello(agentId, {
        protocolVersion: 1,
        minProtocolVersion: 1,
        maxProtocolVersion: 2,
        capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features },
      }),
    );
    const accept = await a.next((m) => !!m.helloAccept, 'the accept');
    expect(accept.helloAccept?.protocolVersion).to.equal(2);
    expect(accept.helloAccept?.capabilities?.features).to.include('inventory');
    if (inv) a.send(inv);
    await a.next((m) => !!m.syncComplete, 'the (empty) snapshot');
    agents.set(agentId, a);
    return a;
  }

  beforeEach(async () => {
    dir = scratchDir();
    backend = await startBackend(dir, { hostNetnsPath: spaces.node.path, ackTimeoutMs: 3000 });
    await connect('dpu-a', inventory('pfa', ['avf0', 'avf1', 'up0']));
    await connect('dpu-b', inventory('pfb', ['bvf0']));
    await connect('dpu-c', undefined);
    beat = setInterval(() => {
      for (const a of agents.values()) a.send({ heartbeat: { seq: 1, sentAtUnixMs: Date.now() } });
    }, 50);
    await waitUntil(async () => (await backend.health()).details?.agentsHealthy === 3, 'three agents');
  });

  afterEach(async () => {
    clearInterval(beat);
    for (const a of agents.values()) a.close();
    agents.clear();
    await backend.stop();
    removeDir(dir);
    const present = new Set(ipJson<IpLink[]>(spaces.node.name, ['link', 'show']).map((l) => l.ifname));
    for (const l of ['avf0', 'avf1', 'bvf0', 'stray0']) if (present.has(l)) ip('link', 'del', l);
  });

  /** Attaches one port on `agentId`, which acks it as `netdev` (created first with the port's MAC). */
  async function ackAs(
    agentId: string,
    netdev: string,
    more: { pfIndex?: number; vfIndex?: number; create?: boolean } = {},
  ): Promise<{ result: Promise<unknown>; port: Port }> {
    n++;
    const a = agents.get(agentId)!;
    const from = a.received.length;
    const s = {
      ...spec(n),
      netnsPath: spaces.workload.path,
      netnsInode: fs.statSync(spaces.workload.path).ino,
      dpu: agentId,
    };
    const result = attachTo(backend, s);
    result.catch(() => undefined);
    const port = (await a.next((m) => !!m.upsert, 'the upsert', 5000, from)).upsert!.port!;
    if (more.create !== false)
      ip('link', 'add', netdev, 'address', port.mac, 'type', 'veth', 'peer', 'name', `${netdev}p`);
    a.send(
      okAck(port.name, port.generation, {
        endpoint: {
          netdev,
          mac: port.mac,
          pfIndex: more.pfIndex,
          vfIndex: more.vfIndex,
          pciAddress: '',
          representor: '',
        },
      }),
    );
    return { result, port };
  }

  async function expectRefused(agentId: string, netdev: string, why: RegExp, more = {}): Promise<void> {
    const { result, port } = await ackAs(agentId, netdev, more);
    const err = await refusedOnceDeleted(agents.get(agentId)!, port, result, why);
    expect(err.message).to.match(new RegExp(`reported ${netdev} as the host end`));
    expect(err.message).to.match(why);
    expect(ipJson<IpLink[]>(spaces.workload.name, ['link', 'show']).map((l) => l.ifname)).to.deep.equal([
      'lo',
    ]);
  }

  it('refuses a clean netdev that is no VF in its inventory', async () => {
    await expectRefused('dpu-a', 'stray0', /not a VF in DPU agent dpu-a's inventory/);
    expect(ipJson<IpLink[]>(spaces.node.name, ['link', 'show']).map((l) => l.ifname)).to.include('stray0');
  });

  it("refuses another agent's VF", async () => {
    await expectRefused('dpu-b', 'avf0', /not a VF in DPU agent dpu-b's inventory/);
  });

  it('refuses a VF named with another PF/VF index than the inventory gives it', async () => {
    await expectRefused('dpu-a', 'avf1', /names it PF 0 VF 0, but the inventory lists it as PF 0 VF 1/, {
      pfIndex: 0,
      vfIndex: 0,
    });
  });

  it('refuses any endpoint of an agent that sent no inventory', async () => {
    await expectRefused('dpu-c', 'stray0', /dpu-c has sent no inventory/);
  });

  it('still applies the host guard to a listed netdev: the uplink stays', async () => {
    await expectRefused('dpu-a', 'up0', /but it carries (MAC|address)/, { create: false });
    const up0 = ipJson<Array<{ flags: string[] }>>(spaces.node.name, ['link', 'show', 'dev', 'up0'])[0];
    expect(up0?.flags).to.include('UP');
  });

  it('moves its own listed VF, and records which VF it is', async () => {
    const { result } = await ackAs('dpu-a', 'avf1', { pfIndex: 0, vfIndex: 1 });
    const r = (await result) as { details?: Record<string, unknown> };
    expect(r.details).to.include({ dpuAgentId: 'dpu-a', dpuPf: 0, dpuVf: 1 });
    expect(ipJson<IpLink[]>(spaces.workload.name, ['link', 'show']).map((l) => l.ifname)).to.include('eth0');
  });
});
