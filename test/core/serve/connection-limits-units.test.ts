import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as net from 'node:net';
import * as path from 'node:path';
import { ConnectionCap } from '../../../core/serve/connection-cap';
import { FD_RESERVE, fitConnectionCaps, getFdLimit } from '../../../core/daemon/fd-limit';
import { LogRate } from '../../../lib/log-rate';

/** A socket that never connects; the cap reads only its byte counters and destroys it. */
class FakeSocket extends net.Socket {
  set fakeRead(n: number) {
    Object.defineProperty(this, 'bytesRead', { value: n, configurable: true });
  }
}

describe('connection cap', () => {
  it('admits up to its limit, then closes the connection silent longest to make room', () => {
    let t = 0;
    const cap = new ConnectionCap(3, { evictable: () => true }, () => t);
    const socks = [new FakeSocket(), new FakeSocket(), new FakeSocket()];
    for (const s of socks) {
      expect(cap.admit(s)).to.equal('admitted');
      t += 10;
    }
    // The first one talks, so the second is now the quietest.
    socks[0]!.fakeRead = 100;
    t += 10;
    const newcomer = new FakeSocket();
    expect(cap.admit(newcomer)).to.equal('evicted-another');
    expect(socks[1]!.destroyed).to.equal(true);
    expect(socks[0]!.destroyed).to.equal(false);
    expect(socks[2]!.destroyed).to.equal(false);
    expect(cap.size).to.equal(3);
    cap.destroyAll();
  });

  it('refuses the newcomer when no connection may be closed', () => {
    const cap = new ConnectionCap(1, { evictable: () => false });
    const busy = new FakeSocket();
    expect(cap.admit(busy)).to.equal('admitted');
    const newcomer = new FakeSocket();
    expect(cap.admit(newcomer)).to.equal('refused');
    expect(newcomer.destroyed).to.equal(true);
    expect(busy.destroyed).to.equal(false);
    cap.destroyAll();
  });
});

describe('log rate', () => {
  it('logs the first event of a kind, then one line per interval counting the events it stands for', () => {
    let t = 0;
    const rate = new LogRate(1000, () => t);
    expect(rate.take('a')).to.equal(1);
    for (let i = 0; i < 50; i++) expect(rate.take('a')).to.equal(undefined);
    expect(rate.take('b')).to.equal(1);
    t = 1000;
    expect(rate.take('a')).to.equal(51);
    expect(rate.take('a')).to.equal(undefined);
  });
});

describe('descriptor limit', () => {
  it('fits both caps below the limit with the reserve to spare, in proportion', () => {
    expect(fitConnectionCaps(65536, { api: 512, cni: 512 })).to.deep.equal({
      api: 512,
      cni: 512,
      reduced: false,
    });
    const fitted = fitConnectionCaps(1024, { api: 512, cni: 1024 });
    expect(fitted.reduced).to.equal(true);
    expect(fitted.api + fitted.cni).to.be.at.most(1024 - FD_RESERVE);
    expect(fitted.cni).to.be.greaterThan(fitted.api);
  });

  it('raises the soft limit to the hard limit at start', () => {
    // Node itself raises the soft limit when it starts, so the child lowers it first with setrlimit.
    const { hard } = getFdLimit();
    const fdLimit = path.resolve(__dirname, '../../../core/daemon/fd-limit.js');
    const script = `
      const koffi = require('koffi');
      const lib = koffi.load('libc.so.6');
      koffi.struct('test_rlimit', { cur: 'uint64_t', max: 'uint64_t' });
      const setrlimit = lib.func('int setrlimit(int resource, const test_rlimit *rlim)');
      if (setrlimit(7, { cur: 512, max: ${hard} }) !== 0) throw new Error('setrlimit failed');
      const f = require(${JSON.stringify(fdLimit)});
      const before = f.getFdLimit().soft;
      console.log(JSON.stringify({ before, raised: f.raiseFdLimit() }));`;
    const out = execFileSync(process.execPath, ['-e', script], {
      encoding: 'utf8',
      cwd: path.resolve(__dirname, '../../../..'),
    });
    const { before, raised } = JSON.parse(out) as { before: number; raised: unknown };
    expect(before).to.equal(512);
    expect(raised).to.deep.equal({ soft: hard, hard, before: 512 });
  });
});
