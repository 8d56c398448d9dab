import { expect } from 'chai';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Store } from '../../../core/store/store';

// A writer process churns the store and is SIGKILLed at random moments; after every kill the store must
// reopen with its invariants intact.

const WRITER = path.join(__dirname, 'fixtures', 'store-writer.js');

function runAndKill(dir: string, afterMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.stdout.once('data', () => setTimeout(() => child.kill('SIGKILL'), afterMs));
    child.once('exit', (code, signal) =>
      signal === 'SIGKILL' ? resolve() : reject(new Error(`writer exited ${code}: ${stderr}`)),
    );
  });
}

function checkInvariants(dir: string): { rows: number } {
  const s = Store.open(dir);
  try {
    const rows = s.all();
    const seen = new Map<string, string>();
    for (const r of rows) {
      expect(r.ips.length, `${r.key} holds no address`).to.be.greaterThan(0);
      for (const ip of r.ips) {
        expect(seen.get(ip.address), `${ip.address} held twice`).to.equal(undefined);
        seen.set(ip.address, r.key);
      }
    }
    return { rows: rows.length };
  } finally {
    void s.close();
  }
}

describe('Store crash safety', () => {
  it('keeps its invariants across 20 SIGKILLs of a writer at random points', async function () {
    this.timeout(120_000);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-crash-'));
    try {
      let sawRows = 0;
      for (let i = 0; i < 20; i++) {
        await runAndKill(dir, 20 + Math.floor(Math.random() * 150));
        sawRows = Math.max(sawRows, checkInvariants(dir).rows);
      }
      expect(sawRows, 'the writer made progress').to.be.greaterThan(0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
