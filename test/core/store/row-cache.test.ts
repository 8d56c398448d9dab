import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RowCache } from '../../../core/store/row-cache';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import { storeRecord } from '../../support/store-record';

// core/store/row-cache.ts against a real store: the row decoded once while nothing is written, and
// never older than the last write that settled, whichever row that write touched.

const record = (key: string, routes: string[]): AttachmentRecord =>
  storeRecord(key, ['10.0.0.2'], { defaultRoute: false, routes });

describe('RowCache', () => {
  let dir: string;
  let store: Store;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-row-cache-'));
    store = Store.open(dir);
  });
  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('decodes the row once while the store writes nothing', async () => {
    await store.put(record('h/wn-host0', ['10.64.0.0/24', '10.64.1.0/24']));
    const cache = new RowCache(store, 'h/wn-host0');
    const first = cache.get();
    expect(first?.routes).to.deep.equal(['10.64.0.0/24', '10.64.1.0/24']);
    expect(cache.get(), 'the same decoded record').to.equal(first);
    expect(store.get('h/wn-host0'), 'a read of the store decodes anew').to.not.equal(first);
  });

  it('reads again after any write settles, and keeps nothing read while one is under way', async () => {
    const cache = new RowCache(store, 'h/wn-host0');
    expect(cache.get()).to.equal(undefined);
    await store.put(record('h/wn-host0', ['10.64.0.0/24']));
    expect(cache.get()?.routes).to.deep.equal(['10.64.0.0/24']);

    // A write under way: what the cache hands out is not kept past it.
    const writing = store.put(record('h/wn-host0', ['10.64.0.0/24', '10.65.0.0/24']));
    expect(store.writeMark).to.equal(undefined);
    cache.get();
    await writing;
    expect(cache.get()?.routes).to.deep.equal(['10.64.0.0/24', '10.65.0.0/24']);

    // A write of another row still moves the mark: read again, the same content.
    const before = cache.get();
    await store.put(record('w1/eth0', []));
    const after = cache.get();
    expect(after).to.not.equal(before);
    expect(after).to.deep.equal(before);

    await store.remove('h/wn-host0');
    expect(cache.get()).to.equal(undefined);
    await store.put(record('h/wn-host0', ['10.66.0.0/24']));
    expect(cache.get()?.routes).to.deep.equal(['10.66.0.0/24']);
  });
});
