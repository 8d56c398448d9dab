import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { journalOf, readStateFile, StateFile, type SimState } from '../../../backends/dpu-sim/state-file';
import type { FabricObject, PeerState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { removeDir, scratchDir } from '../../support/dpu-fixtures';
import { peer, route, vtep } from './fabric-objects';

// The simulator's state file with its journal: a change to one fabric object appends a line instead of
// rewriting ~10,000 objects, and what a reader (a test, a restart of the same boot) gets is still the
// whole state as of the last write that landed; lines a crash left behind a newer full file, and a
// line cut short, change nothing.

describe('DPU simulator: state file journal', () => {
  let dir: string;
  let file: string;
  let fabric: Map<string, FabricObject>;
  let epoch: number;

  let peerStatus: SimState['peerStatus'];
  const render = (): SimState => ({
    agentId: 'dpu-j',
    bootId: 'boot-1',
    pid: process.pid,
    synced: true,
    epoch,
    session: { state: 'connected' },
    ports: [],
    fabric: [...fabric.values()].sort((a, b) => (a.name < b.name ? -1 : 1)),
    ...(peerStatus ? { peerStatus } : {}),
  });
  const names = (s: SimState | undefined): string[] => (s?.fabric ?? []).map((o) => o.name);

  beforeEach(() => {
    dir = scratchDir();
    file = path.join(dir, 'sim.json');
    epoch = 1;
    peerStatus = undefined;
    fabric = new Map(
      [vtep(1, '10.100.1.7'), peer(2, 'n2', '10.100.1.8'), route(3, '10.244.2.0/24', 'peer/n2')].map((o) => [
        o.name,
        o,
      ]),
    );
  });

  afterEach(() => removeDir(dir));

  async function write(state: StateFile): Promise<void> {
    state.changed();
    await state.kept();
  }

  interface Line {
    peerStatus?: PeerState[];
    peerStatusSet?: PeerState[];
    peerStatusGone?: string[];
  }
  const journal = (): Line[] =>
    fs
      .readFileSync(journalOf(file), 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Line);
  const saysPeerStatus = (l: Line): boolean =>
    l.peerStatus !== undefined || l.peerStatusSet !== undefined || l.peerStatusGone !== undefined;

  it('appends a change to the journal, and the file read back is the whole latest state', async () => {
    const state = new StateFile(file, render);
    await write(state);
    const full = fs.readFileSync(file, 'utf8');
    expect(names(readStateFile(file))).to.deep.equal(['peer/n2', 'route/10.244.2.0/24', 'vtep']);

    const n3 = peer(4, 'n3', '10.100.2.9');
    fabric.set(n3.name, n3);
    fabric.delete('route/10.244.2.0/24');
    const moved = route(5, '10.244.2.0/24', 'peer/n3');
    fabric.set(moved.name, moved);
    epoch = 2;
    await write(state);
    expect(fs.readFileSync(file, 'utf8'), 'the full file is not rewritten').to.equal(full);
    const journal = fs.readFileSync(journalOf(file), 'utf8');
    expect(journal.length, 'one object changed: a line far smaller than the file').to.be.below(full.length);
    const read = readStateFile(file);
    expect(names(read)).to.deep.equal(['peer/n2', 'peer/n3', 'route/10.244.2.0/24', 'vtep']);
    expect(read?.fabric?.find((o) => o.name === 'route/10.244.2.0/24')?.peerRoute?.peer).to.equal('peer/n3');
    expect(read?.epoch).to.equal(2);

    fabric.delete('peer/n2');
    await write(state);
    expect(names(readStateFile(file))).to.deep.equal(['peer/n3', 'route/10.244.2.0/24', 'vtep']);

    // Before exiting: one full file, the journal emptied, the same state.
    state.writeNow();
    expect(fs.readFileSync(journalOf(file), 'utf8')).to.equal('');
    expect(names(readStateFile(file))).to.deep.equal(['peer/n3', 'route/10.244.2.0/24', 'vtep']);
  });

  it('journals a PeerStatus only when it says something new, and reads back the last one said', async () => {
    const state = new StateFile(file, render);
    await write(state);
    const say = (reachable: boolean): SimState['peerStatus'] => [
      { name: 'peer/n2', reachable, offloaded: false, txPackets: 0, rxPackets: 0, lastError: '' },
    ];
    peerStatus = say(true);
    await write(state);
    // The agent sends the same word again after each change (a new message, the same content).
    for (let i = 0; i < 3; i++) {
      epoch += 1;
      peerStatus = say(true);
      await write(state);
    }
    expect(journal().map((l) => saysPeerStatus(l))).to.deep.equal([true, false, false, false]);
    peerStatus = say(false);
    await write(state);
    expect(journal().at(-1)?.peerStatusSet).to.deep.equal(say(false));
    const back = readStateFile(file);
    expect(back?.peerStatus).to.deep.equal(say(false));
    expect(back?.epoch).to.equal(epoch);
  });

  it('journals only the states a PeerStatus of 5,000 changed, added or dropped, and reads back the whole', async () => {
    const state = new StateFile(file, render);
    const stateOf = (i: number, reachable = true): PeerState => ({
      name: `peer/n${String(i).padStart(5, '0')}`,
      reachable,
      offloaded: false,
      txPackets: i,
      rxPackets: 0,
      lastError: reachable ? '' : 'its FDB entry is not on wn-vxlan',
    });
    const all = Array.from({ length: 5000 }, (_, i) => stateOf(i));
    peerStatus = all;
    await write(state);
    const size = fs.statSync(file).size;
    const steps: Array<(l: PeerState[]) => PeerState[]> = [
      (l) => l.map((p, i) => (i === 17 ? stateOf(17, false) : p)),
      (l) => [...l, stateOf(5000)],
      (l) => l.filter((p) => p.name !== stateOf(3).name),
      (l) => l.map((p, i) => (i === 4000 ? { ...p, txPackets: 9 } : p)),
    ];
    for (const step of steps) {
      peerStatus = step(peerStatus);
      await write(state);
      expect(readStateFile(file)?.peerStatus).to.deep.equal(peerStatus);
    }
    const lines = journal();
    expect(lines.map((l) => [l.peerStatusSet?.length ?? 0, l.peerStatusGone ?? []])).to.deep.equal([
      [1, []],
      [1, []],
      [0, [stateOf(3).name]],
      [1, []],
    ]);
    expect(fs.statSync(journalOf(file)).size, 'four lines, not four lists').to.be.below(4000);
    expect(fs.statSync(file).size, 'no full write since').to.equal(size);

    // A list out of name order is written whole: a replay orders by name.
    peerStatus = [...peerStatus].reverse();
    await write(state);
    expect(journal().at(-1)?.peerStatus).to.deep.equal(peerStatus);
    expect(readStateFile(file)?.peerStatus).to.deep.equal(peerStatus);
  });

  it('skips lines that follow an older full file, and a line cut short', async () => {
    const first = new StateFile(file, render);
    await write(first);
    fabric.delete('peer/n2');
    await write(first);
    const stale = fs.readFileSync(journalOf(file), 'utf8');
    expect(names(readStateFile(file))).to.not.include('peer/n2');

    // A new process (a restart of the same boot) resumes what was recorded, and writes a full file;
    // a crash right after it, before the journal was emptied, leaves the old lines behind it.
    const resumed = readStateFile(file);
    fabric = new Map((resumed?.fabric ?? []).map((o) => [o.name, o]));
    const back = peer(9, 'n2', '10.100.1.8');
    fabric.set(back.name, back);
    const second = new StateFile(file, render);
    await write(second);
    fs.writeFileSync(journalOf(file), stale);
    expect(names(readStateFile(file)), 'the old line that deleted peer/n2 is skipped').to.include('peer/n2');

    // A line cut short by a crash mid-append is ignored; the lines before it count.
    fabric.delete('route/10.244.2.0/24');
    await write(second);
    fs.appendFileSync(journalOf(file), '{"base":"x","head":{"agentI');
    expect(names(readStateFile(file))).to.deep.equal(['peer/n2', 'vtep']);
  });
});
