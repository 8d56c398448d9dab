import { expect } from 'chai';
import { createLogger } from '../../../core/logger';
import { DpuStatus } from '../../../proto/gen/workloadnet/v1/workload';
import { RawAgent } from '../../support/raw-agent';
import { waitUntil } from '../../support/sim-process';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { LogSink } from '../../support/log-sink';

// The wall clock of a node can jump: NTP stepping a clock that drifted, an operator's `date -s`. The
// daemon's view of its agents must not: a well-behaved agent's heartbeats were dropped as over the rate
// limit for an hour after a step back (and its session ended as a "heartbeat flood"), Status failed to
// serialize a negative heartbeat age, and a step forward ended every session as silent. Here the test
// process's own Date.now (the daemon's, since the backend runs in it) jumps by an hour while a session
// is live, with an agent heartbeating as the protocol asks.

const HOUR_MS = 3_600_000;
const HEARTBEAT_MS = 200;

describe('DPU backend: a wall-clock step while an agent is connected', function () {
  this.timeout(30_000);
  let sink: LogSink;
  let agent: RawAgent;
  const realNow = Date.now;
  /** The wall clock's step; Date.now is replaced before anything reads it, as a real step reaches all. */
  let stepMs = 0;

  beforeEach(() => {
    stepMs = 0;
    Date.now = () => realNow() + stepMs;
  });
  afterEach(() => {
    Date.now = realNow;
  });
  const rig = rawAgentBackend({
    backend: () => ({
      heartbeatIntervalMs: HEARTBEAT_MS,
      logger: createLogger('info', (sink = new LogSink())),
    }),
  });

  beforeEach(async () => {
    // Twice per interval: well inside the rate limit (ten per interval) and the silence limit (three).
    agent = rig.connect(RawAgent.hello('dpu-clock'), HEARTBEAT_MS / 2);
    await agent.next((m) => !!m.helloAccept, 'hello accept');
    await waitUntil(async () => (await rig.backend.health()).ready, 'the agent healthy');
  });

  const heartbeatsReceived = (): number => agent.received.filter((m) => !!m.heartbeat).length;

  /** What Status and `workloadnet dpus` say of the agent, checked as the API would send it. */
  async function expectAgentWell(sessionId: unknown, when: string): Promise<void> {
    const h = await rig.backend.health();
    expect(h.ready, `${when}: ${h.reasons.join('; ')}`).to.equal(true);
    expect(h.details?.sessionId, `${when}: the same session`).to.equal(sessionId);
    expect(h.details?.lastHeartbeatAgeMs, `${when}: the heartbeat age`)
      .to.be.a('number')
      .within(0, 3 * HEARTBEAT_MS);
    expect(h.dpus).to.have.length(1);
    for (const d of h.dpus ?? []) {
      expect(d.lastHeartbeatAgeMs, `${when}: ${d.id}'s heartbeat age`).to.be.within(0, 3 * HEARTBEAT_MS);
      expect(d.healthy, `${when}: ${d.id} healthy`).to.equal(true);
      // What the API sends for `workloadnet dpus` and Status (core/serve/api-server.ts).
      const wire = DpuStatus.fromPartial({
        ...d,
        lastHeartbeatAgeMs: d.lastHeartbeatAgeMs ?? 0,
        sessionId: d.sessionId ?? '',
        peer: d.peer ?? '',
        reason: d.reason ?? '',
      });
      expect(DpuStatus.decode(DpuStatus.encode(wire).finish()).lastHeartbeatAgeMs).to.equal(
        wire.lastHeartbeatAgeMs,
      );
    }
  }

  for (const [label, step] of [
    ['one hour back', -HOUR_MS],
    ['one hour forward', HOUR_MS],
  ] as const) {
    it(`${label}: the agent's heartbeats still count, its session lives on, and Status serializes`, async () => {
      const sessionId = (await rig.backend.health()).details?.sessionId;
      expect(sessionId).to.be.a('string');
      const linesBefore = sink.lines.length;

      stepMs = step;
      // At once, before the agent's next heartbeat: an age or a silence read off the wall clock is an
      // hour off now.
      await expectAgentWell(sessionId, 'right after the step');
      // Ten of the daemon's heartbeats (two seconds): the session's silence is judged some forty times
      // and the agent's heartbeats go through the rate limit some twenty times meanwhile.
      const from = heartbeatsReceived();
      await waitUntil(
        () => agent.isEnded || heartbeatsReceived() >= from + 10,
        "ten of the daemon's heartbeats after the step",
        15_000,
      );
      expect(agent.isEnded, 'the session ended').to.equal(false);
      await expectAgentWell(sessionId, 'two seconds on');
      const said = sink.lines.slice(linesBefore).filter((l) => /rate limit|session ended|flood/.test(l));
      expect(said, 'heartbeats dropped or the session ended').to.deep.equal([]);
    });
  }
});
