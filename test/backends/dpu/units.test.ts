import { expect } from 'chai';
import fc from 'fast-check';
import { status } from '@grpc/grpc-js';
import type { PeerCertificate } from 'node:tls';
import { AckWaiter } from '../../../backends/dpu/ack-waiter';
import { nackError } from '../../../backends/dpu/ack-code';
import { DesiredState } from '../../../backends/dpu/desired-state';
import { decodeDetails, encodeDetails } from '../../../backends/dpu/details';
import { featuresNeeded, macForKey, portFields, portOptions } from '../../../backends/dpu/port-spec';
import { validateDpuId } from '../../../core/attach/validation';
import { validateDpuPort } from '../../../core/dpu-port-options';
import { Metrics } from '../../../core/metrics';
import type { DpuAgentStatus } from '../../../core/backend';
import { TokenBucket } from '../../../backends/dpu/rate-limiter';
import { certificateNames } from '../../../backends/dpu/tls-identity';
import { PortTable } from '../../../backends/dpu-sim/port-table';
import { validatePort } from '../../../backends/dpu-sim/agent-client';
import type { AgentPeer } from '../../../backends/dpu/agent-server';
import { admitHello, negotiateVersion } from '../../../backends/dpu/hello-admission';
import { AgentInventory } from '../../../backends/dpu/agent-inventory';
import { VfPool } from '../../../backends/dpu-sim/vf-pool';
import { SnapshotSync } from '../../../backends/dpu/snapshot-sync';
import {
  AckCode,
  ObjectKind,
  LinkState,
  type Ack,
  type Hello,
  type Inventory,
  type PhysicalFunction,
  type Port,
} from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { WorkloadNetError } from '../../../core/errors';
import { spec } from '../../support/dpu-fixtures';

// The pieces of the DPU backend and simulator that need no process or socket.

const ack = (name: string, generation: number, code = AckCode.ACK_CODE_OK, message = ''): Ack => ({
  name,
  generation,
  code,
  message,
  retryable: false,
  kind: ObjectKind.OBJECT_KIND_PORT,
});

describe('DPU desired state', () => {
  it('gives every change a newer generation, also across delete and re-add of a name', () => {
    const d = new DesiredState();
    const a1 = d.upsert(portFields(spec(1)), 'x');
    const a2 = d.upsert(portFields(spec(1)), 'x');
    const del = d.delete(a2.name);
    const a3 = d.upsert(portFields(spec(1)), 'x');
    expect([a1.generation, a2.generation, del, a3.generation]).to.deep.equal([1, 2, 3, 4]);
  });

  it('keeps restored generations and continues above the highest', () => {
    const d = new DesiredState();
    d.restore(portFields(spec(1)), 41, 'x');
    d.restore(portFields(spec(2)), 7, 'x');
    expect(d.upsert(portFields(spec(3)), 'x').generation).to.equal(42);
    expect(d.snapshot('x').map((p) => [p.name, p.generation])).to.deep.equal([
      ['w1/eth0', 41],
      ['w2/eth0', 7],
      ['w3/eth0', 42],
    ]);
  });

  it("snapshots and counts each agent's ports apart, and follows a port that was re-placed", () => {
    const d = new DesiredState();
    d.upsert(portFields(spec(1)), 'a');
    d.upsert(portFields(spec(2)), 'b');
    d.upsert(portFields(spec(3)), 'b');
    expect(d.snapshot('a').map((p) => p.name)).to.deep.equal(['w1/eth0']);
    expect(d.snapshot('b').map((p) => p.name)).to.deep.equal(['w2/eth0', 'w3/eth0']);
    expect([d.countOn('a'), d.countOn('b'), d.countOn('c')]).to.deep.equal([1, 2, 0]);
    d.upsert(portFields(spec(1)), 'b');
    d.delete('w2/eth0');
    expect([d.countOn('a'), d.countOn('b')]).to.deep.equal([0, 2]);
    expect(d.agents()).to.deep.equal(['b']);
  });

  it('records an ack only at the current generation', () => {
    const d = new DesiredState();
    const p = d.upsert(portFields(spec(1)), 'x');
    expect(d.recordAck(p.name, { generation: p.generation - 1, ok: true, message: '' })).to.equal(false);
    expect(d.recordAck('nobody', { generation: p.generation, ok: true, message: '' })).to.equal(false);
    expect(d.recordAck(p.name, { generation: p.generation, ok: true, message: '' })).to.equal(true);
    expect(d.delete('nobody')).to.equal(undefined);
  });
});

describe('DPU ack waiter', () => {
  it('resolves on the exact generation and reports older ones as stale', async () => {
    const w = new AckWaiter();
    const p = w.wait('a', 5, 's1', 1000, 'port a');
    expect(w.deliver(ack('a', 4), 's1')).to.equal('stale');
    expect(w.deliver(ack('a', 6), 's1')).to.equal('not-waiting');
    expect(w.deliver(ack('a', 5), 's2'), 'another session').to.equal('not-waiting');
    expect(w.deliver(ack('a', 5), 's1')).to.equal('matched');
    expect((await p).generation).to.equal(5);
    expect(w.pending).to.equal(0);
  });

  it('fails with DEADLINE_EXCEEDED after the timeout', async () => {
    const w = new AckWaiter();
    const err = await w.wait('a', 1, 's1', 30, 'port a').catch((e: unknown) => e);
    expect(err).to.be.instanceOf(WorkloadNetError);
    expect((err as WorkloadNetError).code).to.equal('DEADLINE_EXCEEDED');
    expect((err as WorkloadNetError).message).to.match(/port a was not acknowledged within 30 ms/);
    expect(w.pending).to.equal(0);
  });

  it("fails only the ended session's waiters", async () => {
    const w = new AckWaiter();
    const a = w.wait('a', 1, 's1', 1000, 'a').catch((e: WorkloadNetError) => e.code);
    const b = w.wait('b', 2, 's2', 1000, 'b');
    expect(w.failSession('s1', () => new WorkloadNetError('UNAVAILABLE', 'gone'))).to.equal(1);
    expect(await a).to.equal('UNAVAILABLE');
    w.deliver(ack('b', 2), 's2');
    expect((await b).name).to.equal('b');
  });
});

describe('DPU nack mapping', () => {
  it("maps ack codes to error codes and keeps the agent's message", () => {
    expect(nackError(ack('p', 1, AckCode.ACK_CODE_INVALID, 'bad vlan'), 'port p').code).to.equal(
      'INVALID_ARGUMENT',
    );
    expect(nackError(ack('p', 1, AckCode.ACK_CODE_UNSUPPORTED, 'x'), 'port p').code).to.equal(
      'INVALID_ARGUMENT',
    );
    const full = nackError(ack('p', 1, AckCode.ACK_CODE_NO_RESOURCES, 'no VFs left'), 'port p');
    expect(full.code).to.equal('RESOURCE_EXHAUSTED');
    expect(full.retryable).to.equal(true);
    expect(full.message).to.equal('port p was rejected by the agent (NO_RESOURCES): no VFs left');
    expect(nackError(ack('p', 1, AckCode.ACK_CODE_INTERNAL, 'boom'), 'port p').code).to.equal('INTERNAL');
    expect(nackError(ack('p', 1, AckCode.ACK_CODE_UNSPECIFIED, ''), 'port p').message).to.match(
      /UNKNOWN\(0\)\): no message given/,
    );
  });
});

describe('DPU port fields and stored details', () => {
  it('derives a stable, locally administered unicast MAC from the key', () => {
    const m = macForKey('w1/eth0');
    expect(m).to.equal(macForKey('w1/eth0'));
    expect(m).to.not.equal(macForKey('w2/eth0'));
    const first = Number.parseInt(m.slice(0, 2), 16);
    expect(first & 0x02).to.equal(0x02);
    expect(first & 0x01).to.equal(0);
  });

  it('describes dual-stack ports as host prefixes with one default route per family', () => {
    const s = spec(1, {
      ips: [
        {
          family: 4,
          address: '10.90.0.3',
          gateway: '169.254.1.1',
        },
        { family: 6, address: 'fd00::3', gateway: 'fe80::1' },
      ],
    });
    const f = portFields(s);
    expect(f.ips).to.deep.equal(['10.90.0.3/32', 'fd00::3/128']);
    expect(f.routes).to.deep.equal([
      { destination: '0.0.0.0/0', gateway: '169.254.1.1' },
      { destination: '::/0', gateway: 'fe80::1' },
    ]);
  });

  it("gives a port without the namespace's default route its network's ranges via the gateway", () => {
    const ips = [
      { family: 4 as const, address: '10.91.0.3', gateway: '169.254.1.1' },
      { family: 6 as const, address: 'fd00:91::3', gateway: 'fe80::1' },
    ];
    const f = portFields(spec(1, { ips, defaultRoute: false, routes: ['10.91.0.0/24', 'fd00:91::/64'] }));
    expect(f.routes).to.deep.equal([
      { destination: '10.91.0.0/24', gateway: '169.254.1.1' },
      { destination: 'fd00:91::/64', gateway: 'fe80::1' },
    ]);
    expect(portFields(spec(1, { ips, defaultRoute: true, routes: ['10.91.0.0/24'] })).routes).to.deep.equal([
      { destination: '0.0.0.0/0', gateway: '169.254.1.1' },
      { destination: '::/0', gateway: 'fe80::1' },
    ]);
  });

  it('round-trips its details and ignores details of another backend', () => {
    const d = {
      port: 'w1/eth0',
      generation: 9,
      mac: '02:00:00:00:00:01',
      endpoint: 'vf1',
      agentId: 'a',
      bootId: 'b',
    };
    const dp = { ifName: 'eth0', mac: '', mtu: 1500, routes: [], details: encodeDetails(d) };
    // A version 1 agent says nothing of the VF: no keys for it, and none read back.
    expect(Object.keys(dp.details)).to.have.length(6);
    expect(decodeDetails(dp)).to.deep.equal({
      ...d,
      pf: undefined,
      vf: undefined,
      pciAddress: '',
      representor: '',
      ifIndex: undefined,
      portOptions: '',
    });
    const v2 = {
      ...d,
      pf: 0,
      vf: 7,
      pciAddress: '0001:40:00.7',
      representor: 'rp0v7',
      ifIndex: 12,
      portOptions: '{"trust":true}',
    };
    expect(decodeDetails({ ...dp, details: encodeDetails(v2) })).to.deep.equal(v2);
    expect(decodeDetails({ ...dp, details: { hostVeth: 'wn123' } })).to.equal(undefined);
    expect(decodeDetails(undefined)).to.equal(undefined);
  });
});

describe('DPU TLS identity', () => {
  it('takes the common name and DNS, URI and IP subject alternative names', () => {
    const cert = {
      subject: { CN: 'dpu-a' },
      subjectaltname: 'DNS:dpu-a.example, URI:spiffe://node/dpu-a, IP Address:10.0.0.7, email:x@y',
    } as unknown as PeerCertificate;
    expect(certificateNames(cert)).to.deep.equal([
      'dpu-a',
      'dpu-a.example',
      'spiffe://node/dpu-a',
      '10.0.0.7',
    ]);
    expect(certificateNames(undefined)).to.deep.equal([]);
  });
});

describe('heartbeat token bucket', () => {
  it('allows a burst, then the refill rate', () => {
    let now = 0;
    const b = new TokenBucket(3, 1 / 100, () => now);
    expect([b.take(), b.take(), b.take(), b.take()]).to.deep.equal([true, true, true, false]);
    now += 100;
    expect([b.take(), b.take()]).to.deep.equal([true, false]);
  });
});

describe('simulator port table and validation', () => {
  it('refuses new ports beyond max-ports but accepts updates of held ones', () => {
    const t = new PortTable(1);
    const p = { ...portFields(spec(1)), generation: 1 };
    expect(t.hasRoomFor(p.name)).to.equal(true);
    t.set({ port: p });
    expect(t.hasRoomFor(p.name)).to.equal(true);
    expect(t.hasRoomFor('other')).to.equal(false);
  });

  it('finds what is wrong with a port', () => {
    const ok = { ...portFields(spec(1)), generation: 1 };
    expect(validatePort(ok)).to.equal(undefined);
    expect(validatePort({ ...ok, mac: '01:00:5e:00:00:01' })).to.match(/multicast/);
    expect(validatePort({ ...ok, mtu: 20 })).to.match(/MTU 20/);
    expect(validatePort({ ...ok, ips: ['10.0.0.1/33'] })).to.match(/not a CIDR/);
    expect(validatePort({ ...ok, vlan: 5000 })).to.match(/VLAN/);
  });
});

describe('DPU hello admission', () => {
  const hello = (agentId: string, over: Partial<Hello> = {}): Hello => ({
    agentId,
    bootId: 'b1',
    protocolVersion: 1,
    capabilities: undefined,
    minProtocolVersion: 0,
    maxProtocolVersion: 0,
    uplinkAddresses: [],
    uplinkMtu: 0,
    ...over,
  });
  const unix: AgentPeer = { transport: 'unix', address: 'unix:/x', certificateNames: [] };
  const current = { id: 's1', agentId: 'dpu-a', peerAddress: 'p', connectedAt: 0, healthy: true };

  it('accepts a well-formed hello when the slot is free', () => {
    expect(admitHello(hello('dpu-a'), unix, undefined)).to.deep.equal({ ok: true, version: 1 });
  });

  it('refuses ids with spaces or control characters', () => {
    const a = admitHello(hello('dpu a'), unix, undefined);
    expect(a.ok).to.equal(false);
    expect(admitHello(hello('dpu-a', { bootId: '' }), unix, undefined).ok).to.equal(false);
  });

  it('refuses a second live session of the same agent, and takes over from a silent one', () => {
    const same = admitHello(hello('dpu-a'), unix, current);
    expect(same.ok === false && same.code).to.equal(status.ALREADY_EXISTS);
    expect(same.ok === false && same.reason).to.match(/same id is refused/);
    expect(admitHello(hello('dpu-a'), unix, { ...current, healthy: false })).to.deep.equal({
      ok: true,
      version: 1,
      replaces: 's1',
    });
  });

  it('admits other agents beside the live ones, up to the limit', () => {
    expect(admitHello(hello('dpu-b'), unix, undefined, 1, 2)).to.deep.equal({ ok: true, version: 1 });
    const full = admitHello(hello('dpu-c'), unix, undefined, 2, 2);
    expect(full.ok === false && full.code).to.equal(status.RESOURCE_EXHAUSTED);
    expect(full.ok === false && full.reason).to.match(/serves 2 DPU agents.*dpu-c is refused/);
  });

  it('picks the highest version both speak: older, newer and disjoint offers', () => {
    const offer = (min: number, max: number): Hello =>
      hello('dpu-a', { protocolVersion: min, minProtocolVersion: min, maxProtocolVersion: max });
    expect(negotiateVersion(hello('dpu-a', { protocolVersion: 1 })), 'a version 1 agent').to.equal(1);
    expect(negotiateVersion(hello('dpu-a', { protocolVersion: 2 })), 'a version 2 agent').to.equal(2);
    expect(negotiateVersion(offer(1, 2))).to.equal(2);
    expect(negotiateVersion(offer(1, 5)), 'a newer agent that still speaks ours').to.equal(4);
    expect(negotiateVersion(offer(2, 9))).to.equal(4);
    expect(negotiateVersion(offer(5, 6)), 'disjoint, newer').to.match(
      /protocol versions 5-6 are not supported; this daemon speaks versions 1-4/,
    );
    expect(negotiateVersion(hello('dpu-a', { protocolVersion: 0 })), 'unset').to.match(
      /version 0 is not supported/,
    );
    expect(negotiateVersion(hello('dpu-a', { protocolVersion: 7 }))).to.match(/version 7 is not supported/);
    expect(negotiateVersion(offer(2, 1))).to.match(/empty range/);
    const refused = admitHello(offer(5, 6), unix, undefined);
    expect(refused.ok === false && refused.code).to.equal(status.FAILED_PRECONDITION);
  });

  it('requires a TLS agent id to be one of the certificate names', () => {
    const tls: AgentPeer = { transport: 'tls', address: 'ipv4:127.0.0.1:1', certificateNames: ['dpu-a'] };
    expect(admitHello(hello('dpu-a'), tls, undefined).ok).to.equal(true);
    const bad = admitHello(hello('dpu-b'), tls, undefined);
    expect(bad.ok === false && bad.code).to.equal(status.PERMISSION_DENIED);
  });
});

describe('DPU snapshot sync', () => {
  const port = (name: string, generation: number): Port => ({ ...portFields(spec(1)), name, generation });

  it('completes when every port is acked at its snapshot generation, counting failures', async () => {
    const s = new SnapshotSync('s', 1, [port('a', 1), port('b', 2)]);
    expect(s.ack('a', 9, true), 'wrong generation').to.equal(false);
    expect(s.ack('a', 1, true)).to.equal(false);
    expect(s.complete).to.equal(false);
    expect(s.ack('b', 2, false)).to.equal(true);
    await s.done;
    expect(s.failed).to.deep.equal(['b']);
    expect(s.durationMs).to.be.a('number');
  });

  it('completes without a port whose generation was superseded, and at once when empty', () => {
    const s = new SnapshotSync('s', 1, [port('a', 1)]);
    expect(s.supersede('a')).to.equal(true);
    expect(new SnapshotSync('s', 2, []).complete).to.equal(true);
  });
});

describe('DPU simulator VF pool', () => {
  it('hands out the lowest free VF, on the PF asked for, and none when the PF or the pool is full', () => {
    const pool = new VfPool('dpu-a', 2, 2);
    expect(pool.allocate('p1')).to.deep.equal({ pf: 0, vf: 0 });
    expect(pool.allocate('p1'), 'a port keeps its VF').to.deep.equal({ pf: 0, vf: 0 });
    expect(pool.allocate('p2', 1)).to.deep.equal({ pf: 1, vf: 0 });
    expect(pool.allocate('p3')).to.deep.equal({ pf: 0, vf: 1 });
    expect(pool.allocate('p4', 0), 'PF 0 is full').to.equal(undefined);
    expect(pool.allocate('p4', 7), 'no PF 7').to.equal(undefined);
    expect(pool.allocate('p4')).to.deep.equal({ pf: 1, vf: 1 });
    expect(pool.allocate('p5')).to.equal(undefined);
    expect(pool.free).to.equal(0);
    pool.release('p3');
    expect(pool.allocate('p5')).to.deep.equal({ pf: 0, vf: 1 });
  });

  it('lists every VF in its inventory under names a host would give them, distinct per agent', () => {
    const a = new VfPool('dpu-a', 2, 3);
    a.allocate('p1');
    const inv = a.inventory();
    expect(inv.pfs.map((pf) => [pf.index, pf.vfTotal, pf.vfFree, pf.vfs.length])).to.deep.equal([
      [0, 3, 2, 3],
      [1, 3, 3, 3],
    ]);
    const vf = inv.pfs[1]?.vfs[2];
    expect(vf?.netdev)
      .to.equal(`${a.pfName(1)}v2`)
      .and.to.have.length.at.most(15);
    expect(new VfPool('dpu-b', 1, 1).pfName(0)).to.not.equal(a.pfName(0));
    // The daemon takes it whole, and knows each VF by its netdev.
    const parsed = AgentInventory.parse(inv);
    if (typeof parsed === 'string') throw new Error(parsed);
    expect(parsed.vf(vf?.netdev ?? '')).to.deep.equal({ pf: 1, vf: 2, pciAddress: vf?.pciAddress });
    expect([parsed.vfTotal, parsed.vfFree]).to.deep.equal([6, 5]);
  });
});

describe('DPU agent inventory', () => {
  const pf = (over: Partial<PhysicalFunction> = {}): PhysicalFunction => ({
    index: 0,
    name: 'enp3s0f0',
    pciAddress: '0000:03:00.0',
    linkState: LinkState.LINK_STATE_UP,
    speedMbps: 25000,
    mtu: 1500,
    vfTotal: 2,
    vfFree: 2,
    vfs: [{ index: 0, netdev: 'enp3s0f0v0', pciAddress: '0000:03:00.2' }],
    ...over,
  });
  const parse = (pfs: PhysicalFunction[]): AgentInventory | string =>
    AgentInventory.parse({ pfs, firmwareVersion: 'x', agentVersion: 'y' });

  it('refuses what cannot be true, keeping nothing of it', () => {
    expect(parse([pf(), pf()])).to.match(/PF 0 is listed twice/);
    expect(parse([pf({ name: 'has space' })])).to.match(/no valid netdev name/);
    expect(parse([pf({ pciAddress: 'nope' })])).to.match(/malformed PCI address/);
    expect(parse([pf({ vfFree: 3 })])).to.match(/more free VFs/);
    expect(parse([pf({ vfTotal: 0, vfFree: 0 })])).to.match(/lists 1 VFs but has 0/);
    const dup = pf({ vfs: [pf().vfs[0]!, { ...pf().vfs[0]!, index: 1 }] });
    expect(parse([dup])).to.match(/enp3s0f0v0 twice/);
    expect(parse([pf({ vfs: [{ index: 0, netdev: 'a/b', pciAddress: '' }] })])).to.match(/VF 0 has no valid/);
    expect(parse([pf()])).to.be.instanceOf(AgentInventory);
  });
});

describe('DPU fields of Attach (validation)', () => {
  it('takes an agent id as agents send it, and refuses anything else', () => {
    expect(validateDpuId('dpu-a')).to.equal('dpu-a');
    expect(validateDpuId('')).to.equal(undefined);
    expect(() => validateDpuId('dpu a')).to.throw(/dpu must be a DPU agent id/);
    expect(() => validateDpuId('x'.repeat(254))).to.throw(/dpu must be a DPU agent id/);
  });

  it('checks VF settings: whole rates, min not above max, known link states', () => {
    expect(validateDpuPort({ maxTxRateMbps: 100, minTxRateMbps: 100, trust: true })).to.deep.equal({
      maxTxRateMbps: 100,
      minTxRateMbps: 100,
      trust: true,
    });
    expect(validateDpuPort({})).to.equal(undefined);
    expect(() => validateDpuPort({ maxTxRateMbps: 10, minTxRateMbps: 20 })).to.throw(/must not be above/);
    expect(() => validateDpuPort({ maxTxRateMbps: 1.5 })).to.throw(/whole number/);
    expect(() => validateDpuPort({ pf: -1 })).to.throw(/whole number/);
    expect(() => validateDpuPort({ linkState: 'up' as 'auto' })).to.throw(/auto, enable or disable/);
  });

  it('round-trips VF settings through the wire form', () => {
    const o = { maxTxRateMbps: 5, spoofCheck: false, linkState: 'disable' as const, pf: 0 };
    const fields = portFields(spec(1), undefined, o);
    expect(portOptions(fields)).to.deep.equal(o);
    expect(portFields(spec(1)).qos).to.equal(undefined);
    expect(featuresNeeded(fields).map(([f]) => f)).to.deep.equal([
      'qos-rate',
      'qos-spoof-check',
      'qos-link-state',
      'pf-select',
    ]);
  });
});

describe('DPU agent metrics', () => {
  it('keeps one series per agent, for exactly the agents last reported', async () => {
    const m = new Metrics();
    const agent = (id: string, healthy: boolean, ports: number): DpuAgentStatus => ({
      id,
      connected: healthy,
      healthy,
      bootId: '',
      protocolVersion: 2,
      firmwareVersion: '',
      agentVersion: '',
      pfs: [],
      vfsTotal: 8,
      vfsFree: 8 - ports,
      ports,
      lastHeartbeatAgeMs: healthy ? 500 : undefined,
      synced: true,
    });
    m.setDpus([agent('dpu-a', true, 3), agent('dpu-b', false, 1)]);
    let text = await m.registry.metrics();
    expect(text).to.include('workloadnet_dpu_agent_healthy{agent="dpu-a"} 1');
    expect(text).to.include('workloadnet_dpu_agent_healthy{agent="dpu-b"} 0');
    expect(text).to.include('workloadnet_dpu_agent_ports{agent="dpu-a"} 3');
    expect(text).to.include('workloadnet_dpu_agent_vfs_free{agent="dpu-b"} 7');
    expect(text).to.include('workloadnet_dpu_agent_heartbeat_age_seconds{agent="dpu-a"} 0.5');
    expect(text).to.not.include('workloadnet_dpu_agent_heartbeat_age_seconds{agent="dpu-b"}');
    m.setDpus([agent('dpu-b', true, 0)]);
    text = await m.registry.metrics();
    expect(text).to.not.include('agent="dpu-a"');
  });
});

describe('DPU protocol version 2 messages, fuzzed', () => {
  const inventory: fc.Arbitrary<Inventory> = fc.record({
    pfs: fc.array(
      fc.record({
        index: fc.oneof(fc.nat(4), fc.constant(0xffffffff)),
        name: fc.oneof(fc.constantFrom('pf0', 'pf1', 'lo', '', 'a b'), fc.string({ maxLength: 18 })),
        pciAddress: fc.oneof(fc.constantFrom('0000:03:00.0', ''), fc.string({ maxLength: 14 })),
        linkState: fc.integer({ min: -1, max: 3 }) as fc.Arbitrary<LinkState>,
        speedMbps: fc.nat(),
        mtu: fc.nat(),
        vfTotal: fc.nat(6),
        vfFree: fc.nat(6),
        vfs: fc.array(
          fc.record({
            index: fc.nat(6),
            netdev: fc.oneof(fc.constantFrom('vf0', 'vf1', 'vf2'), fc.string({ maxLength: 18 })),
            pciAddress: fc.oneof(fc.constant(''), fc.string({ maxLength: 14 })),
          }),
          { maxLength: 5 },
        ),
      }),
      { maxLength: 4 },
    ),
    firmwareVersion: fc.string({ maxLength: 300 }),
    agentVersion: fc.string({ maxLength: 20 }),
  });

  it('parses any inventory into one that is consistent, or a reason, never throwing', () => {
    fc.assert(
      fc.property(inventory, (inv) => {
        const parsed = AgentInventory.parse(inv);
        if (typeof parsed === 'string') return parsed.length > 0;
        expect(parsed.vfFree).to.be.at.most(parsed.vfTotal);
        expect(parsed.firmwareVersion.length).to.be.at.most(128);
        for (const pf of inv.pfs) {
          for (const vf of pf.vfs)
            expect(parsed.vf(vf.netdev)).to.deep.equal({
              pf: pf.index,
              vf: vf.index,
              pciAddress: vf.pciAddress,
            });
        }
        return true;
      }),
      { numRuns: 500, seed: 1308 },
    );
  });

  it('negotiates any offer to a version both speak, or a reason', () => {
    fc.assert(
      fc.property(fc.nat(10), fc.nat(10), fc.nat(10), (v, min, max) => {
        const picked = negotiateVersion({
          agentId: 'a',
          bootId: 'b',
          protocolVersion: v,
          capabilities: undefined,
          minProtocolVersion: min,
          maxProtocolVersion: max,
          uplinkAddresses: [],
          uplinkMtu: 0,
        });
        if (typeof picked === 'string') return /not supported|empty range/.test(picked);
        const [lo, hi] = max > 0 ? [min || 1, max] : [v, v];
        return picked >= Math.max(lo, 1) && picked <= Math.min(hi, 4);
      }),
      { numRuns: 500, seed: 1308 },
    );
  });
});
