import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { open } from 'lmdb';
import { STORE_FILE } from '../../../core/store/store-environment';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import { StoreWriteHealth } from '../../../core/store/store-write-health';
import type { WorkloadNetError } from '../../../core/errors';

function row(workloadId: string): AttachmentRecord {
  return {
    key: `${workloadId}/eth0`,
    workloadId,
    ifName: 'eth0',
    netnsPath: '',
    netnsInode: 0,
    ips: [{ family: 4, address: '10.0.0.1', gateway: '169.254.1.1' }],
    mtu: 1500,
    backend: 'linux',
    state: 'ready',
    createdAt: new Date(0).toISOString(),
  };
}

describe('Store identity', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-harden-identity-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('is written once when the store is created; the store is new until its first reconcile is recorded', async () => {
    const s = Store.open(dir, { node: 'node-a' });
    expect(s.isNew).to.equal(true);
    const id = s.identity;
    expect(id.node).to.equal('node-a');
    expect(id.storeId).to.match(/^[0-9a-f-]{36}$/);
    expect(Date.parse(id.createdAt)).to.be.closeTo(Date.now(), 60_000);
    await s.close();
    // A start that ended before its reconcile: the next open finds the store new again.
    const interrupted = Store.open(dir, { node: 'node-b' });
    expect(interrupted.isNew).to.equal(true);
    expect(interrupted.identity).to.deep.equal(id);
    await interrupted.recordFirstReconcile([row('adopted')], { pool: '10.0.0.1' });
    expect(interrupted.isNew).to.equal(false);
    await interrupted.close();
    const again = Store.open(dir, { node: 'node-b' });
    expect(again.isNew).to.equal(false);
    expect(again.identity).to.deep.equal(id);
    expect(again.all().map((r) => r.key)).to.deep.equal(['adopted/eth0']);
    expect(again.cursors()).to.deep.equal({ pool: '10.0.0.1' });
    await again.close();
  });

  it('records the adopted rows and the end of being new in one transaction: a failed write leaves it new with no rows', async () => {
    const s = Store.open(dir);
    const unwritable = {
      family: 4 as const,
      gateway: '',
      get address(): string {
        throw new Error('cannot encode');
      },
    };
    const bad = { ...row('second'), ips: [unwritable] };
    const err = await s.recordFirstReconcile([row('first'), bad], {}).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err, 'a row that cannot be encoded fails the write').to.be.instanceOf(Error);
    await s.close();
    const again = Store.open(dir);
    expect(again.isNew).to.equal(true);
    expect(again.count()).to.equal(0);
    await again.close();
  });

  it('defaults the node to the host name', async () => {
    const s = Store.open(dir);
    expect(s.identity.node).to.equal(os.hostname());
    await s.close();
  });

  it('gives a store from before identities one, without calling it new', async () => {
    const s = Store.open(dir);
    await s.put({
      key: 'w/eth0',
      workloadId: 'w',
      ifName: 'eth0',
      netnsPath: '/x',
      netnsInode: 1,
      ips: [],
      mtu: 1500,
      backend: 't',
      state: 'ready',
      createdAt: new Date(0).toISOString(),
    });
    await s.recordFirstReconcile([], {});
    const old = s.identity;
    await s.close();
    const raw = open({ path: path.join(dir, STORE_FILE), compression: false });
    await raw.openDB({ name: 'meta' }).remove('identity');
    await raw.close();
    const upgraded = Store.open(dir);
    expect(upgraded.isNew).to.equal(false);
    expect(upgraded.identity.storeId).to.not.equal(old.storeId);
    await upgraded.close();
  });

  it('starts healthy for writes', async () => {
    const s = Store.open(dir);
    expect(s.writeHealth()).to.deep.equal({ ok: true });
    await s.close();
  });
});

/** lmdb's shape of a failed commit: a generic error whose commitError promise carries the errno. */
function commitFailure(errno: number, message: string): Error {
  const cause = Object.assign(new Error(message), { code: errno });
  const commitError = Promise.reject(cause);
  commitError.catch(() => undefined);
  return Object.assign(new Error('Commit failed (see commitError for details)'), { commitError });
}

describe('Store write health', () => {
  const file = '/var/lib/wn-test/workloadnet.mdb';

  async function failure(health: StoreWriteHealth, err: unknown): Promise<WorkloadNetError> {
    try {
      await health.run(() => Promise.reject(err));
    } catch (e) {
      return e as WorkloadNetError;
    }
    throw new Error('the write did not fail');
  }

  it('turns a full disk into RESOURCE_EXHAUSTED naming the store, and a read-only one into UNAVAILABLE', async () => {
    const health = new StoreWriteHealth(file, async () => undefined, undefined, 60_000);
    const full = await failure(health, commitFailure(28, 'No space left on device'));
    expect(full.code).to.equal('RESOURCE_EXHAUSTED');
    expect(full.retryable).to.equal(true);
    expect(full.message).to.include(file).and.include('ENOSPC');
    const ro = await failure(health, commitFailure(30, 'Read-only file system'));
    expect(ro.code).to.equal('UNAVAILABLE');
    expect(ro.message).to.include(file).and.include('read-only');
    const h = health.current;
    expect(h.ok).to.equal(false);
    if (!h.ok) expect(h.reason).to.include('read-only');
    health.stop();
  });

  it('passes errors that are not about the disk through unchanged, and stays healthy', async () => {
    const health = new StoreWriteHealth(file, async () => undefined);
    const bug = new TypeError('cannot encode');
    expect(await failure(health, bug)).to.equal(bug);
    expect(health.current.ok).to.equal(true);
  });

  it('keeps the time of the first failure and recovers by its probe once a write succeeds', async () => {
    let probes = 0;
    const health = new StoreWriteHealth(
      file,
      async () => {
        probes++;
        if (probes < 3) throw commitFailure(28, 'No space left on device');
      },
      undefined,
      20,
    );
    await failure(health, commitFailure(28, 'No space left on device'));
    const first = health.current;
    await failure(health, commitFailure(28, 'No space left on device'));
    const second = health.current;
    expect(first.ok || second.ok).to.equal(false);
    if (!first.ok && !second.ok) expect(second.since).to.equal(first.since);
    for (let i = 0; i < 100 && !health.current.ok; i++) await new Promise((r) => setTimeout(r, 10));
    expect(health.current.ok).to.equal(true);
    expect(probes).to.equal(3);
  });
});
