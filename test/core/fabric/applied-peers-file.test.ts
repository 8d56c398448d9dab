import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { AppliedPeersFile } from '../../../core/fabric/applied-peers-file';
import type { Peer } from '../../../core/peer-source';
import { createLogger } from '../../../core/logger';

// The last applied peer table on disk: what a restart gives the withdrawal grace.

const peer = (i: number): Peer => ({
  node: `n${i}`,
  underlay: [`10.100.1.${i}`],
  mtu: 1500,
  bootId: 'b',
  prefixes: [`10.244.${i}.0/24`],
});

describe('applied peers file', () => {
  let dir: string;
  let lines: string[];
  const log = () =>
    createLogger(
      'warn',
      new Writable({
        write(chunk: Buffer, _enc, done) {
          lines.push(chunk.toString());
          done();
        },
      }),
    );
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-applied-'));
    lines = [];
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('gives back the table saved by the previous run, written after the turn that saved it', async () => {
    const file = path.join(dir, 'fabric-peers.json');
    new AppliedPeersFile(file, log()).save([peer(1), peer(2)]);
    expect(fs.existsSync(file), 'not written in the turn of the apply that saved it').to.equal(false);
    await new Promise((r) => setTimeout(r, 20));
    expect(new AppliedPeersFile(file, log()).load().map((p) => p.node)).to.deep.equal(['n1', 'n2']);
    expect(fs.readdirSync(dir), 'no temporary file left').to.deep.equal(['fabric-peers.json']);
  });

  it('writes at most once per interval, the last table at its end, and what is pending at flush', async () => {
    const file = path.join(dir, 'fabric-peers.json');
    const f = new AppliedPeersFile(file, log(), { minIntervalMs: 60_000 });
    f.save([peer(1)]);
    await new Promise((r) => setTimeout(r, 20));
    f.save([peer(1), peer(2)]);
    f.save([peer(1), peer(2), peer(3)]);
    expect(new AppliedPeersFile(file, log()).load(), 'only the first within the interval').to.have.length(1);
    f.flush();
    expect(new AppliedPeersFile(file, log()).load()).to.have.length(3);
  });

  it('starts from nothing when the file is missing, and says why when it is damaged', () => {
    const file = path.join(dir, 'fabric-peers.json');
    expect(new AppliedPeersFile(file, log()).load()).to.deep.equal([]);
    expect(lines).to.deep.equal([]);
    fs.writeFileSync(file, '{"version":1,"peers":[{"node":');
    expect(new AppliedPeersFile(file, log()).load()).to.deep.equal([]);
    expect(lines.join('')).to.include('last peer table ignored');
    fs.writeFileSync(file, JSON.stringify({ version: 1, peers: [peer(1), { node: 7 }] }));
    expect(
      new AppliedPeersFile(file, log()).load().map((p) => p.node),
      'malformed entries dropped',
    ).to.deep.equal(['n1']);
  });
});
