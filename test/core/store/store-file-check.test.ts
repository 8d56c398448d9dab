import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { WorkloadNetError } from '../../../core/errors';
import { checkStore } from '../../../core/store/store-check';
import { checkStoreFile } from '../../../core/store/store-file-check';
import { STORE_FILE } from '../../../core/store/store-environment';
import { Store } from '../../../core/store/store';
import type { AttachmentRecord } from '../../../core/store/attachment-record';

// A damaged data file is refused in words before lmdb maps it (lmdb would die of SIGBUS or SIGSEGV).

function record(n: number): AttachmentRecord {
  return {
    key: `w${n}/eth0`,
    workloadId: `w${n}`,
    ifName: 'eth0',
    netnsPath: `/var/run/netns/w${n}`,
    netnsInode: n,
    ips: [
      {
        family: 4,
        address: `10.9.${n >> 8}.${n & 255}`,
        gateway: '169.254.1.1',
      },
    ],
    mtu: 1500,
    backend: 'test',
    state: 'ready',
    createdAt: new Date(0).toISOString(),
  };
}

async function storeWithRows(dir: string, rows: number): Promise<string> {
  const s = Store.open(dir);
  for (let i = 0; i < rows; i++) await s.put(record(i));
  await s.close();
  return path.join(dir, STORE_FILE);
}

function openError(dir: string): WorkloadNetError {
  try {
    void Store.open(dir).close();
  } catch (err) {
    return err as WorkloadNetError;
  }
  throw new Error('the damaged store was opened');
}

describe('Store file check', () => {
  let dir: string;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-harden-filecheck-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('passes a sound store with rows, and reports no file for a new directory', async () => {
    expect(checkStoreFile(path.join(dir, STORE_FILE))).to.include({ exists: false });
    const file = await storeWithRows(dir, 300);
    const report = checkStoreFile(file);
    expect(report.problems).to.deep.equal([]);
    expect(report.meta?.pageSize).to.be.oneOf([4096, 8192, 16384, 65536]);
    const full = await checkStore(dir);
    expect(full).to.include({ ok: true, attachments: 300, addresses: 300 });
  });

  it('refuses a half-truncated file, naming the file and the missing bytes', async () => {
    const file = await storeWithRows(dir, 300);
    fs.truncateSync(file, Math.floor(fs.statSync(file).size / 2));
    const err = openError(dir);
    expect(err.code).to.equal('FAILED_PRECONDITION');
    expect(err.message)
      .to.include(file)
      .and.match(/is truncated: it holds \d+ bytes.*uses pages up to/);
    expect((await checkStore(dir)).ok).to.equal(false);
  });

  it('refuses a file cut off inside its meta pages', async () => {
    const file = await storeWithRows(dir, 10);
    fs.truncateSync(file, 100);
    expect(openError(dir).message).to.match(/meta page 0 is missing/);
  });

  it('refuses zeroed meta pages, and a single zeroed one', async () => {
    const file = await storeWithRows(dir, 50);
    const pageSize = checkStoreFile(file).meta!.pageSize;
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.alloc(pageSize), 0, pageSize, 0);
    fs.closeSync(fd);
    expect(openError(dir).message).to.include(file).and.include('meta page 0 is zeroed');
    const fd2 = fs.openSync(file, 'r+');
    fs.writeSync(fd2, Buffer.alloc(pageSize), 0, pageSize, pageSize);
    fs.closeSync(fd2);
    expect(openError(dir).message).to.include('meta page 0 is zeroed; meta page 1 is zeroed');
  });

  it('refuses a garbage page inside a tree, found by walking every tree with plain reads', async () => {
    const file = await storeWithRows(dir, 300);
    const meta = checkStoreFile(file).meta!;
    // Every page the trees reach: overwrite one in the middle of the attachments tree.
    const fd = fs.openSync(file, 'r+');
    const target = meta.mainRoot; // holds the database records; the walker must notice first thing
    fs.writeSync(fd, randomBytes(meta.pageSize), 0, meta.pageSize, Number(target) * meta.pageSize);
    fs.closeSync(fd);
    const err = openError(dir);
    expect(err.code).to.equal('FAILED_PRECONDITION');
    expect(err.message).to.include(`page ${target} of the main tree`);
    const check = await checkStore(dir);
    expect(check.ok).to.equal(false);
    expect(check.problems.join()).to.include(`page ${target}`);
  });

  it('finds a garbage leaf page of the attachments tree', async () => {
    const file = await storeWithRows(dir, 300);
    const { pageSize, lastPage } = checkStoreFile(file).meta!;
    // Damage each tree page in turn (on a copy): every page the walk reaches must be caught.
    const pristine = fs.readFileSync(file);
    let caught = 0;
    for (let pg = 2; pg <= Number(lastPage); pg++) {
      const damaged = Buffer.from(pristine);
      randomBytes(pageSize).copy(damaged, pg * pageSize);
      // Keep the page's own number right so only its contents are garbage.
      damaged.writeBigUInt64LE(BigInt(pg), pg * pageSize);
      fs.writeFileSync(file, damaged);
      if (checkStoreFile(file).problems.length > 0) caught++;
    }
    // Free pages (not in any tree) may hold anything; tree pages may not, and most pages are in a tree.
    expect(caught).to.be.greaterThan(Number(lastPage) / 2);
  });

  it('finds nothing wrong in a store that a writer is changing while it is checked', async () => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'store-writer.js'), dir], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await new Promise((resolve) => child.stdout.once('data', resolve));
      const findings: string[] = [];
      for (let i = 0; i < 40; i++) {
        findings.push(...checkStoreFile(path.join(dir, STORE_FILE)).problems);
        await new Promise((r) => setTimeout(r, 10));
      }
      // The only thing a busy writer may cause is a check that says it could not finish.
      expect(findings.filter((f) => !f.startsWith('changed under the check'))).to.deep.equal([]);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
