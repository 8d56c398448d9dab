import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LeakSweep, type SweepEvents } from '../../../core/reconcile/leak-sweep';
import { silentLogger } from '../../../core/logger';
import type { NetnsOpener } from '../../../core/netns-opener';
import type { Netns, NetnsPresence } from '../../../lib/netns/netns-handle';
import type { AttachmentRecord } from '../../../core/store/attachment-record';
import type { HoldKind } from '../../../core/metrics';
import type { Hold } from '../../../core/reconcile/sweep-guard';

// The leak sweep's own rules, without a daemon: which rows it may release and when. Namespaces are
// files in a scratch directory whose presence the test decides; the directories the guard judges
// are real, so that "another mount" and "empty" are what the kernel reports.

const INTERVAL_MS = 60_000;
const DAY_MS = 24 * 3600 * 1000;

/** Rows the sweep sees, and what it released. */
class Rows {
  readonly rows = new Map<string, AttachmentRecord>();
  readonly released: string[] = [];

  add(workloadId: string, netnsPath: string, extra: Partial<AttachmentRecord> = {}): AttachmentRecord {
    const rec: AttachmentRecord = {
      key: `${workloadId}/eth0`,
      workloadId,
      ifName: 'eth0',
      netnsPath,
      netnsInode: 1000 + this.rows.size,
      ips: [],
      mtu: 1500,
      backend: 'linux',
      state: 'ready',
      createdAt: new Date().toISOString(),
      ...extra,
    };
    this.rows.set(rec.key, rec);
    return rec;
  }

  get target(): {
    rows: () => Iterable<AttachmentRecord>;
    release: (rec: AttachmentRecord) => Promise<boolean>;
  } {
    return {
      rows: () => [...this.rows.values()],
      release: async (rec) => {
        if (!this.rows.delete(rec.key)) return false;
        this.released.push(rec.workloadId);
        return true;
      },
    };
  }
}

/** Namespaces by path: present unless the test says gone (or unseen). */
class Presence implements NetnsOpener {
  readonly states = new Map<string, NetnsPresence>();
  openWorkload(): Promise<Netns> {
    throw new Error('the sweep opens no namespace');
  }
  openHost(): Promise<Netns> {
    throw new Error('the sweep opens no namespace');
  }
  async stillPresent(p: string): Promise<boolean> {
    return (this.states.get(p) ?? 'present') === 'present';
  }
  async presence(p: string): Promise<NetnsPresence> {
    return this.states.get(p) ?? 'present';
  }
}

class Events implements SweepEvents {
  releasedCount = 0;
  holds: Array<HoldKind | undefined> = [];
  released(): void {
    this.releasedCount++;
  }
  held(hold: Hold | undefined): void {
    this.holds.push(hold?.kind);
  }
}

describe('leak sweep rules', () => {
  let dir: string;
  let rows: Rows;
  let ns: Presence;
  let events: Events;
  /** The sweep's monotonic clock, moved by the test. */
  let mono: number;
  let sweep: LeakSweep;
  const realNow = Date.now;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-sweep-rules-'));
    rows = new Rows();
    ns = new Presence();
    events = new Events();
    mono = 5_000_000;
    sweep = new LeakSweep(rows.target, ns, INTERVAL_MS, silentLogger(), events, () => mono);
  });
  afterEach(() => {
    Date.now = realNow;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** n workloads with namespace files in `dir`, recorded as made through its mount. */
  function workloads(n: number, inDir = dir): AttachmentRecord[] {
    const dev = fs.existsSync(inDir) ? fs.statSync(inDir).dev : undefined;
    return Array.from({ length: n }, (_, i) => {
      const p = path.join(inDir, `ns${rows.rows.size}`);
      if (fs.existsSync(inDir)) fs.writeFileSync(p, '');
      return rows.add(`w${rows.rows.size}-${i}`, p, dev === undefined ? {} : { netnsDirDev: dev });
    });
  }

  function remove(rec: AttachmentRecord): void {
    fs.rmSync(rec.netnsPath, { force: true });
    ns.states.set(rec.netnsPath, 'gone');
  }

  /** One periodic sweep, one interval after the last. */
  async function tick(): Promise<string[]> {
    const r = await sweep.sweep();
    mono += INTERVAL_MS;
    return r.released;
  }

  it('a wall clock stepped forward does not make a new attachment old enough to release', async () => {
    const [w] = workloads(5);
    Date.now = () => realNow() + DAY_MS;
    remove(w!);
    // Seen at once and again right away: this process has known it for no time at all.
    expect((await sweep.sweep()).suspected).to.deep.equal([]);
    expect((await sweep.sweep()).released).to.deep.equal([]);
    expect(rows.released).to.deep.equal([]);
    // On the monotonic clock it grows old: two sightings later it goes.
    await tick();
    await tick();
    await tick();
    expect(rows.released).to.deep.equal([w!.workloadId]);
  });

  it('a wall clock stepped back does not keep an attachment young', async () => {
    const [w] = workloads(5);
    Date.now = () => realNow() - DAY_MS;
    remove(w!);
    await tick();
    await tick();
    await tick();
    expect(rows.released).to.deep.equal([w!.workloadId]);
  });

  it('counts rows recorded before the process started as known since its start, not since the first sweep', async () => {
    const [w, fresh] = workloads(5);
    rows.rows.delete(fresh!.key);
    sweep.knownSinceStart(rows.rows.values());
    rows.rows.set(fresh!.key, fresh!);
    remove(w!);
    remove(fresh!);
    // One interval after the start: the earlier row is old enough, the one attached since is not.
    mono = INTERVAL_MS;
    expect((await sweep.sweep()).suspected).to.deep.equal([w!.key]);
    mono += INTERVAL_MS / 2;
    expect((await sweep.sweep(true)).released).to.deep.equal([w!.key]);
    expect(rows.released).to.deep.equal([w!.workloadId]);
  });

  it('releases one workload gone among several, on its second sighting', async () => {
    const all = workloads(5);
    await tick();
    remove(all[2]!);
    expect(await tick()).to.deep.equal([]);
    expect(await tick()).to.deep.equal([all[2]!.key]);
    expect(events.holds.every((h) => h === undefined)).to.equal(true);
    expect(sweep.hold).to.equal(undefined);
  });

  it('releases nothing when more than a fifth of the workloads look gone at once, says why, and goes on once they are back', async () => {
    const all = workloads(10);
    await tick();
    for (const w of all.slice(0, 3)) ns.states.set(w.netnsPath, 'gone');
    for (let i = 0; i < 4; i++) await tick();
    expect(rows.released).to.deep.equal([]);
    expect(sweep.hold?.kind).to.equal('too_many_gone');
    expect(sweep.hold?.reason).to.match(/3 of 10 workload namespaces look gone at once \(at most 2/);
    expect(events.holds.at(-1)).to.equal('too_many_gone');
    // The view is sound again, and one namespace really went.
    ns.states.clear();
    remove(all[4]!);
    await tick();
    expect(sweep.hold).to.equal(undefined);
    await tick();
    expect(rows.released).to.deep.equal([all[4]!.workloadId]);
  });

  it('releases nothing while the directory is another mount than the one the attachments were made through', async () => {
    const all = workloads(3);
    await tick();
    // The directory now shows another device than the one recorded (a tmpfs mounted over it).
    for (const w of all) {
      rows.rows.set(w.key, { ...w, netnsDirDev: fs.statSync(dir).dev + 1 });
      remove(w);
    }
    // One gone of three would pass the share rule: the mount alone holds.
    ns.states.set(all[1]!.netnsPath, 'present');
    ns.states.set(all[2]!.netnsPath, 'present');
    for (let i = 0; i < 3; i++) await tick();
    expect(rows.released).to.deep.equal([]);
    expect(sweep.hold?.kind).to.equal('directory_other_mount');
    expect(sweep.hold?.reason).to.contain(`${dir} is another mount`);
  });

  it('releases nothing while the directory is missing, or empty though several workloads were made there', async () => {
    const all = workloads(10);
    await tick();
    for (const w of all.slice(0, 2)) remove(w);
    for (const f of fs.readdirSync(dir)) fs.rmSync(path.join(dir, f));
    // Two of ten is within the share: the empty directory is what holds.
    for (let i = 0; i < 3; i++) await tick();
    expect(rows.released).to.deep.equal([]);
    expect(sweep.hold?.kind).to.equal('directory_empty');
    fs.rmSync(dir, { recursive: true });
    await tick();
    expect(rows.released).to.deep.equal([]);
    expect(sweep.hold?.kind).to.equal('directory_unreadable');
    expect(sweep.hold?.reason).to.match(/cannot be read \(ENOENT\)/);
  });

  it('the operator forces a release while the guard holds (gc --namespaces-gone), and a dry run shows it first', async () => {
    const all = workloads(4);
    await tick();
    for (const w of all.slice(0, 3)) remove(w);
    await tick();
    await tick();
    expect(rows.released).to.deep.equal([]);
    const preview = await sweep.preview();
    expect(preview.released.sort()).to.deep.equal(
      all
        .slice(0, 3)
        .map((w) => w.key)
        .sort(),
    );
    expect(preview.held).to.match(/3 of 4 workload namespaces look gone/);
    expect(rows.released).to.deep.equal([]);
    const forced = await sweep.sweep(true);
    expect(forced.released.sort()).to.deep.equal(
      all
        .slice(0, 3)
        .map((w) => w.key)
        .sort(),
    );
    expect(rows.released.sort()).to.deep.equal(
      all
        .slice(0, 3)
        .map((w) => w.workloadId)
        .sort(),
    );
    expect(events.releasedCount).to.equal(3);
  });

  it('never counts a namespace it cannot see as gone, even forced', async () => {
    const all = workloads(5);
    await tick();
    ns.states.set(all[0]!.netnsPath, 'unseen');
    await tick();
    await tick();
    await sweep.sweep(true);
    expect(rows.released).to.deep.equal([]);
  });
});
