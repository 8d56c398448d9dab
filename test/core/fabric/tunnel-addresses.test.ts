import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { TunnelAddresses } from '../../../core/fabric/tunnel-addresses';
import { silentLogger } from '../../../core/logger';
import { Store } from '../../../core/store/store';
import { waitUntil } from '../../support/wait-until';

// The fabric's tunnel address of an etcd node: one address of its own whole blocks, reserved through
// the allocator for the node itself, kept in the store. A pod never gets it, a restart holds the same
// one before any attach, and a start with the fabric off keeps it (it may still be on wn-vxlan).

const BLOCK = '10.244.7.0/30';
const V6_BLOCK = 'fd10:0:7::/126';

describe('fabric tunnel addresses (reserved from the node’s own blocks)', () => {
  let dir: string;
  let store: Store | undefined;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-tunnel-'))));
  afterEach(async () => {
    await store?.close();
    store = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** One daemon start: a fresh allocator with the node's blocks, the stored pods' addresses held first. */
  async function boot(opts: { wanted?: boolean; pods?: string[]; blocks?: string[] } = {}) {
    store = Store.open(dir);
    const s = store;
    const allocator = new IpAllocator(
      (opts.blocks ?? [BLOCK, V6_BLOCK]).map((cidr) => ({ cidr, wholeBlock: true })),
    );
    for (const a of opts.pods ?? []) allocator.markUsed(a);
    const tunnel = new TunnelAddresses({
      allocator,
      store: () => s,
      wanted: opts.wanted ?? true,
      log: silentLogger(),
    });
    await tunnel.restore();
    return { allocator, tunnel };
  }

  const reserved = async (tunnel: TunnelAddresses, families = 2): Promise<{ 4?: string; 6?: string }> => {
    await waitUntil(
      async () => Object.keys(tunnel.current()).length === families,
      'tunnel addresses reserved',
      5_000,
      { intervalMs: 5 },
    );
    return tunnel.current();
  };

  it('reserves one address per family from the blocks, which no pod then gets', async () => {
    const { allocator, tunnel } = await boot({ pods: ['10.244.7.0'] });
    const t = await reserved(tunnel);
    expect(t[4]).to.be.oneOf(['10.244.7.1', '10.244.7.2', '10.244.7.3']);
    expect(t[6]).to.match(/^fd10:0:7::[0-3]?$/);
    expect(store!.tunnelAddresses()).to.deep.equal(t);
    // Every other address of the /30 goes to pods, then the block is full: the tunnel address never.
    const pods = [0, 1].map(() => allocator.allocate([4])[0]?.address);
    expect(pods).to.not.include(t[4]);
    expect(() => allocator.allocate([4])).to.throw(/exhausted|no free|full/i);
  });

  it('holds the same address after a restart, before any attach can take it', async () => {
    const first = await boot();
    const t = await reserved(first.tunnel);
    await store!.close();
    store = undefined;
    const { allocator, tunnel } = await boot();
    // Held by restore() itself, not later: an attach right after the start-up reconcile cannot get it.
    expect(tunnel.current()).to.deep.equal(t);
    const pods = [0, 1, 2].map(() => allocator.allocate([4])[0]?.address);
    expect(pods).to.not.include(t[4]);
    expect(pods).to.have.length(3);
    expect(() => allocator.allocate([4])).to.throw();
  });

  it('never takes an address a stored pod holds (the reservation follows their restore)', async () => {
    const { tunnel } = await boot({ pods: ['10.244.7.0', '10.244.7.1', '10.244.7.2'], blocks: [BLOCK] });
    expect((await reserved(tunnel, 1))[4]).to.equal('10.244.7.3');
  });

  it('waits for a block: a family without pools gets its address once one is there', async () => {
    const { allocator, tunnel } = await boot({ blocks: [] });
    expect(tunnel.current()).to.deep.equal({});
    allocator.addPool({ cidr: BLOCK, wholeBlock: true });
    expect((await reserved(tunnel, 1))[4]).to.match(/^10\.244\.7\.[0-3]$/);
  });

  it('a start with the fabric off keeps the stored address reserved, unpublished; the next start with it on uses it again', async () => {
    const first = await boot();
    const t = await reserved(first.tunnel);
    await store!.close();
    store = undefined;
    const off = await boot({ wanted: false });
    expect(off.tunnel.current()).to.deep.equal({});
    expect(store!.tunnelAddresses()).to.deep.equal(t);
    // It may still be on wn-vxlan (nothing runs to take it off): no pod gets it.
    const pods = [0, 1, 2].map(() => off.allocator.allocate([4])[0]?.address);
    expect(pods).to.not.include(t[4]);
    expect(() => off.allocator.allocate([4])).to.throw();
    await store!.close();
    store = undefined;
    const on = await boot();
    expect(on.tunnel.current()).to.deep.equal(t);
  });

  it('a start with the fabric off drops a stored address no block of the node contains any more', async () => {
    const first = await boot({ blocks: [BLOCK] });
    await reserved(first.tunnel, 1);
    await store!.close();
    store = undefined;
    const { tunnel } = await boot({ wanted: false, blocks: ['10.244.9.0/30'] });
    expect(tunnel.current()).to.deep.equal({});
    expect(store!.tunnelAddresses()).to.deep.equal({});
  });

  it('drops a stored address no block of the node contains any more and reserves another', async () => {
    const first = await boot({ blocks: [BLOCK] });
    const t = await reserved(first.tunnel, 1);
    await store!.close();
    store = undefined;
    const { tunnel } = await boot({ blocks: ['10.244.9.0/30'] });
    const again = await reserved(tunnel, 1);
    expect(again[4]).to.not.equal(t[4]);
    expect(again[4]).to.match(/^10\.244\.9\.[0-3]$/);
    expect(store!.tunnelAddresses()).to.deep.equal(again);
  });
});
