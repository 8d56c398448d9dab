import { expect } from 'chai';
import {
  LOSSES_TO_DEGRADE,
  PeerProber,
  type ProbeTarget,
  type ProbeTransport,
} from '../../../backends/linux/fabric/peer-prober';
import type { PeerProbe } from '../../../core/fabric-dataplane';

// The prober's state machine with a hand-moved clock and a transport that records what was sent and
// answers only when told: no timers, no sockets.

class FakeTransport implements ProbeTransport {
  readonly log: Array<{ node: string; seq: number; family: 4 | 6 }> = [];
  failWith: string | undefined;
  private answerFn: (family: 4 | 6, seq: number) => void = () => undefined;
  listen(answer: (family: 4 | 6, seq: number) => void): void {
    this.answerFn = answer;
  }
  send(t: ProbeTarget, seq: number): string | undefined {
    if (this.failWith !== undefined) return this.failWith;
    this.log.push({ node: t.node, seq, family: t.family });
    return undefined;
  }
  /** Answers the last probe sent to `node`. */
  answerLast(node: string): void {
    const p = [...this.log].reverse().find((s) => s.node === node);
    if (!p) throw new Error(`nothing sent to ${node}`);
    this.answerFn(p.family, p.seq);
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const target = (node: string, n = 1): ProbeTarget => ({ node, address: `10.244.${n}.0`, family: 4 });

describe('PeerProber (state machine)', () => {
  let now = 0;
  let transport: FakeTransport;
  let changes: Array<[string, PeerProbe['state']]>;
  let prober: PeerProber;

  beforeEach(() => {
    now = 1000;
    transport = new FakeTransport();
    changes = [];
    prober = new PeerProber({
      intervalMs: 1000,
      timeoutMs: 500,
      transport,
      now: () => now,
      wall: () => 1_700_000_000_000 + now,
      onChange: (node, p) => changes.push([node, p.state]),
    });
  });

  /** Moves the clock in 10 ms ticks. */
  function advance(ms: number): void {
    for (let t = 0; t < ms; t += 10) {
      now += 10;
      prober.tick();
    }
  }

  it('starts unknown, becomes reachable at the first answer, with its round-trip time', () => {
    prober.setTargets([target('nb')]);
    expect(prober.health().get('nb')?.state).to.equal('unknown');
    prober.tick();
    expect(transport.log).to.have.length(1);
    now += 3;
    transport.answerLast('nb');
    const p = prober.health().get('nb');
    expect(p).to.include({ state: 'reachable', rttMs: 3, medianRttMs: 3, lost: 0, answered: true });
    expect(p?.target).to.equal('10.244.1.0');
    expect(p?.since).to.equal(new Date(1_700_000_000_000 + now).toISOString());
    expect(changes).to.deep.equal([['nb', 'reachable']]);
  });

  it(`is degraded after ${LOSSES_TO_DEGRADE} unanswered probes in a row, and reachable again at one answer`, () => {
    prober.setTargets([target('nb')]);
    prober.tick();
    transport.answerLast('nb');
    // A probe counts as lost at its timeout, half an interval after it was sent.
    for (let i = 1; i <= LOSSES_TO_DEGRADE; i++) {
      advance(1000);
      expect(prober.health().get('nb')?.state, `after ${i - 1} lost`).to.equal('reachable');
    }
    advance(1000);
    expect(prober.health().get('nb')).to.include({ state: 'degraded', lost: LOSSES_TO_DEGRADE });
    advance(10);
    transport.answerLast('nb');
    expect(prober.health().get('nb')).to.include({ state: 'reachable', lost: 0 });
    expect(changes).to.deep.equal([
      ['nb', 'reachable'],
      ['nb', 'degraded'],
      ['nb', 'reachable'],
    ]);
  });

  it('never calls a peer that has not answered yet degraded (it may hold no address to answer on)', () => {
    prober.setTargets([target('nb')]);
    advance(10_000);
    expect(prober.health().get('nb')).to.include({ state: 'unknown', answered: false });
    expect(prober.health().get('nb')?.lost).to.be.at.least(9);
    // Told once, still unknown, when it has left enough probes unanswered never to have proved itself.
    expect(changes).to.deep.equal([['nb', 'unknown']]);
  });

  it('counts a send the kernel refused (no route) as a lost probe', () => {
    prober.setTargets([target('nb')]);
    prober.tick();
    transport.answerLast('nb');
    transport.failWith = 'ENETUNREACH';
    advance(3000);
    expect(prober.health().get('nb')?.state).to.equal('degraded');
  });

  it('takes a late answer (after the timeout) for nothing', () => {
    prober.setTargets([target('nb')]);
    prober.tick();
    advance(600);
    transport.answerLast('nb');
    expect(prober.health().get('nb')).to.include({ state: 'unknown', lost: 1 });
  });

  it('keeps the median of the recent round trips', () => {
    prober.setTargets([target('nb')]);
    for (const rtt of [5, 1, 9, 3]) {
      advance(1000 - (now % 1000));
      if (transport.log.length === 0) prober.tick();
      now += rtt;
      transport.answerLast('nb');
    }
    expect(prober.health().get('nb')).to.include({ rttMs: 3, medianRttMs: 4 });
  });

  it('spreads a whole table over one interval, and sends each peer once per interval', () => {
    const many = Array.from({ length: 500 }, (_, i) => target(`n${i}`, i % 250));
    prober.setTargets(many);
    let most = 0;
    for (let t = 0; t < 1000; t += 10) {
      const before = transport.log.length;
      prober.tick();
      now += 10;
      most = Math.max(most, transport.log.length - before);
    }
    // 500 peers per second: five per 10 ms tick, never the whole table at once.
    expect(most).to.be.at.most(6);
    const perPeer = new Map<string, number>();
    for (const s of transport.log) perPeer.set(s.node, (perPeer.get(s.node) ?? 0) + 1);
    expect([...perPeer.values()].every((n) => n === 1)).to.equal(true);
    // The last few fall due in the interval's last 10 ms, at the next tick.
    expect(perPeer.size).to.be.within(490, 500);
    prober.tick();
    expect(new Set(transport.log.map((s) => s.node)).size).to.equal(500);
  });

  it('keeps the state of a peer whose target is the same, starts over when it changed, forgets one gone', () => {
    prober.setTargets([target('nb', 2), target('nc', 3)]);
    advance(1000);
    transport.answerLast('nb');
    transport.answerLast('nc');
    prober.setTargets([target('nb', 2), target('nc', 9)]);
    expect(prober.health().get('nb')?.state).to.equal('reachable');
    expect(prober.health().get('nc')).to.include({ state: 'unknown', target: '10.244.9.0', answered: false });
    prober.setTargets([target('nc', 9)]);
    expect([...prober.health().keys()]).to.deep.equal(['nc']);
  });

  it('has nothing in flight once every probe is answered or timed out (the transport stops reading)', () => {
    prober.setTargets([target('nb'), target('nc', 2)]);
    advance(500);
    expect(prober.inFlight).to.equal(2);
    transport.answerLast('nb');
    transport.answerLast('nc');
    expect(prober.inFlight).to.equal(0);
    prober.setTargets([target('nb')]);
    advance(500);
    expect(prober.inFlight).to.equal(1);
    advance(500);
    expect(prober.inFlight).to.equal(0);
  });
});
