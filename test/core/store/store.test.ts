import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { open } from 'lmdb';
import { MIN_READER_SCHEMA, SCHEMA_VERSION } from '../../../core/store/store-schema';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import type { WorkloadNetError } from '../../../core/errors';
import { setStoreSchemaVersion } from '../../support/store-schema';
import { storeRecord } from '../../support/store-record';

describe('Store', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-store-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('keeps a row and its addresses across reopen', async () => {
    const s = Store.open(dir);
    await s.put(storeRecord('w1/eth0', ['10.0.0.2']));
    await s.close();
    const again = Store.open(dir);
    expect(again.get('w1/eth0')?.ips[0]?.address).to.equal('10.0.0.2');
    await again.close();
  });

  it('replaces a record whole, and remove returns the addresses it held', async () => {
    const s = Store.open(dir);
    await s.put(storeRecord('w1/eth0', ['10.0.0.2', '10.0.0.3']));
    await s.put(storeRecord('w1/eth0', ['10.0.0.3']));
    expect(s.get('w1/eth0')?.ips.map((i) => i.address)).to.deep.equal(['10.0.0.3']);
    const released = await s.remove('w1/eth0');
    expect(released.map((i) => i.address)).to.deep.equal(['10.0.0.3']);
    expect(s.get('w1/eth0')).to.equal(undefined);
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
    await s.put(storeRecord('old/eth0', ['10.0.0.9']));
    await s.close();
    await setStoreSchemaVersion(dir, 0);
    const migrated = Store.open(dir);
    expect(migrated.schemaVersion).to.equal(SCHEMA_VERSION);
    expect(migrated.get('old/eth0')?.ips[0]?.address).to.equal('10.0.0.9');
    await migrated.close();
  });

  it('upgrades a version 1 store (rows carrying their own property names) to shared structures', async () => {
    // Written the way version 1 wrote: plain lmdb databases, no shared record structures.
    const v1 = open({ path: path.join(dir, 'workloadnet.mdb'), compression: false });
    const rows = [
      storeRecord('w1/eth0', ['10.0.0.2']),
      {
        ...storeRecord('w2/eth0', ['10.0.0.3']),
        pod: { uid: 'u', namespace: 'ns', name: 'p' },
        origin: 'cni',
      },
    ];
    const attachments = v1.openDB<AttachmentRecord, string>({ name: 'attachments' });
    const allocations = v1.openDB<string, string>({ name: 'allocations' });
    await v1.transaction(() => {
      for (const r of rows) {
        void attachments.put(r.key, r);
        for (const ip of r.ips) void allocations.put(ip.address, r.key);
      }
      void v1.openDB({ name: 'meta' }).put('schemaVersion', 1);
    });
    const v1Size = attachments.getBinary('w2/eth0')?.length ?? 0;
    await v1.close();

    const s = Store.open(dir);
    expect(s.schemaVersion).to.equal(SCHEMA_VERSION);
    expect(s.all()).to.deep.equal(rows);
    await s.put(storeRecord('w3/eth0', ['10.0.0.4']));
    await s.close();

    const again = Store.open(dir);
    expect(again.all().map((r) => r.key)).to.deep.equal(['w1/eth0', 'w2/eth0', 'w3/eth0']);
    expect(again.get('w2/eth0')).to.deep.equal(rows[1]);
    expect(again.count()).to.equal(3);
    await again.close();
    // The rewritten row no longer spells out its property names.
    const raw = open({ path: path.join(dir, 'workloadnet.mdb'), compression: false, readOnly: true });
    const v2Size = raw.openDB({ name: 'attachments' }).getBinary('w2/eth0')?.length ?? 0;
    await raw.close();
    expect(v2Size)
      .to.be.greaterThan(0)
      .and.lessThan(v1Size * 0.75);
  });

  it('maps its file once as it grows, so pages read earlier are not resident twice', async function () {
    if (process.arch !== 'x64' && process.arch !== 'arm64') this.skip();
    const s = Store.open(dir);
    // ~2 MB of rows: lmdb's default map (128 KiB, doubled on demand) would have been replaced ~5 times.
    for (let i = 0; i < 40; i++) {
      await Promise.all(
        Array.from({ length: 100 }, (_, j) => {
          const n = i * 100 + j;
          return s.put(storeRecord(`w${n}/eth0`, [`10.${n >> 16}.${(n >> 8) & 255}.${n & 255}`]));
        }),
      );
    }
    expect(s.count()).to.equal(4000);
    const file = path.join(dir, 'workloadnet.mdb');
    const maps = fs
      .readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .filter((l) => l.endsWith(` ${file}`));
    expect(maps, maps.join('\n')).to.have.length(1);
    await s.close();
  });

  it('refuses a store written by a newer version that older builds cannot read, saying what to do', async () => {
    await Store.open(dir).close();
    await setStoreSchemaVersion(dir, SCHEMA_VERSION + 1, SCHEMA_VERSION + 1);
    try {
      Store.open(dir);
      expect.fail('opening a newer store must fail');
    } catch (err) {
      expect((err as WorkloadNetError).code).to.equal('FAILED_PRECONDITION');
      expect((err as Error).message).to.match(
        new RegExp(`newer workloadnet.*needs at least ${SCHEMA_VERSION + 1}.*downgrading is not supported`),
      );
    }
  });

  it('refuses a newer store that names no minimum reader (written before stores named one)', async () => {
    await Store.open(dir).close();
    const root = open({ path: path.join(dir, 'workloadnet.mdb'), compression: false });
    root.openDB<unknown, string>({ name: 'meta' }).removeSync('minReaderSchema');
    await root.close();
    await setStoreSchemaVersion(dir, SCHEMA_VERSION + 1);
    expect(() => Store.open(dir)).to.throw(/newer workloadnet/);
  });

  it('names the oldest schema that reads it in every store it opens', async () => {
    await Store.open(dir).close();
    const root = open({ path: path.join(dir, 'workloadnet.mdb'), compression: false });
    expect(root.openDB<unknown, string>({ name: 'meta' }).get('minReaderSchema')).to.equal(MIN_READER_SCHEMA);
    await root.close();
  });

  it('opens a newer store that says this build may read it (a rollback), rows kept, stamps left as they are', async () => {
    const s = Store.open(dir);
    await s.put(storeRecord('w1/eth0', ['10.0.0.2']));
    const storeId = s.identity.storeId;
    await s.close();
    await setStoreSchemaVersion(dir, SCHEMA_VERSION + 1, SCHEMA_VERSION);
    const rolledBack = Store.open(dir);
    expect(rolledBack.get('w1/eth0')?.ips[0]?.address).to.equal('10.0.0.2');
    expect(rolledBack.identity.storeId, 'the same store, not a new one').to.equal(storeId);
    await rolledBack.put(storeRecord('w2/eth0', ['10.0.0.3']));
    await rolledBack.close();
    const forward = Store.open(dir);
    expect(forward.schemaVersion, 'the newer stamp stays for the roll forward').to.equal(SCHEMA_VERSION + 1);
    await forward.close();
  });
});
