import { expect } from 'chai';
import { RestartingReader, type StoppableReader } from '../../../backends/linux/restarting-reader';
import { silentLogger } from '../../../core/logger';
import { waitUntil } from '../../support/wait-until';

// The keeper of a long-lived reader: starts it again whenever it ends by itself, after a back-off that
// doubles up to a bound, says in words while it is down, and starts nothing once stopped.

class FakeReader implements StoppableReader {
  stopped = false;
  constructor(readonly die: (why: string) => void) {}
  stop(): Promise<void> {
    this.stopped = true;
    return Promise.resolve();
  }
}

describe('a reader kept running (backends/linux/restarting-reader.ts)', () => {
  let keeper: RestartingReader<FakeReader> | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  function keep(opts: { failStarts?: number } = {}) {
    const started: Array<{ at: number; reader?: FakeReader }> = [];
    const restarted: FakeReader[] = [];
    let fails = opts.failStarts ?? 0;
    keeper = new RestartingReader<FakeReader>({
      what: 'test reader',
      meanwhile: 'the slow path still works',
      logger: silentLogger(),
      firstDelayMs: 20,
      maxDelayMs: 80,
      start: (died) => {
        if (fails-- > 0) {
          started.push({ at: Date.now() });
          throw new Error('EPERM: not allowed');
        }
        const reader = new FakeReader(died);
        started.push({ at: Date.now(), reader });
        return reader;
      },
      onRestart: (r) => restarted.push(r),
    });
    return { keeper, started, restarted };
  }

  it('starts a new reader after one dies, stops the dead one, and tells the new one it missed events', async () => {
    const { keeper: k, started, restarted } = keep();
    await k.begin();
    const first = k.current as FakeReader;
    expect(k.down()).to.equal(undefined);
    first.die('read failed: EBADF');
    expect(first.stopped).to.equal(true);
    expect(k.current).to.equal(undefined);
    expect(k.down()).to.match(
      /^test reader down since \S+ \(read failed: EBADF\); started again in 0\.\d s; the slow path still works$/,
    );
    await waitUntil(() => k.current !== undefined, 'a new reader', 1_000, { intervalMs: 5 });
    expect(started).to.have.length(2);
    expect(restarted).to.deep.equal([k.current]);
    expect(k.down()).to.equal(undefined);
    // A second report of the same death (an error, then the thread's exit) starts nothing more.
    first.die('exit code 1');
    await new Promise((r) => setTimeout(r, 60));
    expect(started).to.have.length(2);
  });

  it('keeps trying a reader that cannot start, waiting twice as long each time up to the bound', async () => {
    const { keeper: k, started } = keep({ failStarts: 4 });
    await k.begin();
    expect(k.down()).to.match(/start failed: EPERM: not allowed/);
    await waitUntil(() => k.current !== undefined, 'the reader up at last', 2_000, { intervalMs: 5 });
    const gaps = started.slice(1).map((s, i) => s.at - (started[i]?.at ?? 0));
    // 20, 40, 80, 80 ms (timers fire late, never early).
    expect(gaps).to.have.length(4);
    [20, 40, 80, 80].forEach((min, i) => expect(gaps[i], `wait ${i + 1}`).to.be.at.least(min - 2));
    expect(gaps[3], 'bounded').to.be.below(160);
    expect(k.restartCount).to.equal(1);
  });

  it('starts nothing once stopped, even with a restart pending', async () => {
    const { keeper: k, started } = keep();
    await k.begin();
    (k.current as FakeReader).die('gone');
    await k.stop();
    await new Promise((r) => setTimeout(r, 60));
    expect(started).to.have.length(1);
    expect(k.current).to.equal(undefined);
    expect(k.down()).to.equal(undefined);
  });
});
