import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SCHEMA_VERSION, Store, type AttachmentRecord } from '../../core/store';
import type { WorkloadNetError } from '../../core/errors';

function record(key: string, addresses: string[]): AttachmentRecord {
  const [workloadId = '', ifName = ''] = key.split('/');
  return {
    key,
    workloadId,
    ifName,
    netnsPath: '/var/run/netns/x',
    netnsInode: 1,
    ips: addresses.map((address) => ({
      family: 4,
      address,
      pool: '10.0.0.0/24',
      poolPrefixLength: 24,
      gateway: '169.254.1.1',
    })),
    mtu: 1500,
    backend: 'test',
    state: 'ready',
    createdAt: new Date(0).toISOString(),
  };
}

describe('Store', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-store-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('keeps a row and its address index together across reopen', async () => {
    const s = Store.open(dir);
    await s.put(record('w1/eth0', ['10.0.0.2']));
    await s.close();
    const again = Store.open(dir);
    expect(again.get('w1/eth0')?.ips[0]?.address).to.equal('10.0.0.2');
    expect([...again.allocationIndex()]).to.deep.equal([['10.0.0.2', 'w1/eth0']]);
    await again.close();
  });

  it('drops index entries of addresses a record no longer holds, and all of them on remove', async () => {
    const s = Store.open(dir);
    await s.put(record('w1/eth0', ['10.0.0.2', '10.0.0.3']));
    await s.put(record('w1/eth0', ['10.0.0.3']));
    expect([...s.allocationIndex().keys()]).to.deep.equal(['10.0.0.3']);
    const released = await s.remove('w1/eth0');
    expect(released.map((i) => i.address)).to.deep.equal(['10.0.0.3']);
    expect(s.allocationIndex().size).to.equal(0);
    expect(s.count()).to.equal(0);
    await s.close();
  });

  it('records the schema version of a new store', async () => {
    const s = Store.open(dir);
    expect(s.schemaVersion).to.equal(SCHEMA_VERSION);
    await s.close();
  });

  it('migrates a store written without a schema version to the current one, keeping its rows', async () => {
    const s = Store.open(dir);
    await s.put(record('old/eth0', ['10.0.0.9']));
    s.setSchemaVersionForTest(0);
    await s.close();
    const migrated = Store.open(dir);
    expect(migrated.schemaVersion).to.equal(SCHEMA_VERSION);
    expect(migrated.get('old/eth0')?.ips[0]?.address).to.equal('10.0.0.9');
    await migrated.close();
  });

  it('refuses a store written by a newer version with a message saying what to do', async () => {
    const s = Store.open(dir);
    s.setSchemaVersionForTest(SCHEMA_VERSION + 1);
    await s.close();
    try {
      Store.open(dir);
      expect.fail('opening a newer store must fail');
    } catch (err) {
      expect((err as WorkloadNetError).code).to.equal('FAILED_PRECONDITION');
      expect((err as Error).message).to.match(/newer workloadnet.*downgrading is not supported/);
    }
  });
});
