import { expect } from 'chai';
import type { DataplaneResult } from '../../../core/backend';
import { createLogger } from '../../../core/logger';
import { PortOperState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { PORT_STATUS_MESSAGE_MAX, PortStatusGate } from '../../../backends/dpu/port-status-gate';
import { okAck, spec, view } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { sleep } from '../../support/sim-process';
import { attachTo } from '../../support/attach-spec';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { LogSink } from '../../support/log-sink';

// An agent floods PortStatus about a port the daemon knows, each message carrying 1,000 characters of
// text. Before: every message was a log line with the whole text, 247 MiB of log in 20 s. Now repeats
// are dropped, changes pass at a few per second per port, the text is cut short, and the port still
// ends up in the state the agent last reported.

describe('DPU backend: a PortStatus flood', function () {
  this.timeout(60_000);
  let sink: LogSink;
  const rig = rawAgentBackend({
    backend: () => ({
      heartbeatIntervalMs: 200,
      ackTimeoutMs: 3000,
      logger: createLogger('debug', (sink = new LogSink())),
    }),
  });
  let agent: RawAgent;

  beforeEach(async () => {
    // Without heartbeats the session would end 600 ms after the flood's last message, while the test
    // still waits for the held-back state: the assertion below is about the flood, not about silence.
    agent = rig.connect(RawAgent.hello('dpu-flood'));
    await agent.next((m) => !!m.helloAccept, 'hello accept');
  });

  async function knownPort(): Promise<{ name: string; dataplane: DataplaneResult }> {
    const attaching = attachTo(rig.backend, spec(1));
    const up = await agent.next((m) => !!m.upsert, 'the upsert');
    const port = up.upsert!.port!;
    agent.send(okAck(port.name, port.generation));
    return { name: port.name, dataplane: await attaching };
  }

  it('keeps the log bounded, cuts the agent text short, and applies the last state reported', async () => {
    const { name, dataplane } = await knownPort();
    const before = sink.bytes;
    const text = 'x'.repeat(1000);
    const messages = 20_000;
    for (let i = 0; i < messages; i++) {
      // Flapping up and down, with runs of repeats in between; the last one says down.
      const down = Math.floor(i / 3) % 2 === 1 || i === messages - 1;
      agent.send({
        portStatus: {
          name,
          operState: down ? PortOperState.PORT_OPER_STATE_DOWN : PortOperState.PORT_OPER_STATE_UP,
          message: text,
        },
      });
      if (i % 1000 === 0) await sleep(1);
    }
    // The port's state catches up with the last message (a held-back one is passed on within a tick).
    const deadline = Date.now() + 10_000;
    let drift = await rig.backend.check(view(spec(1), dataplane));
    while (!drift.some((d) => d.kind === 'port-down') && Date.now() < deadline) {
      await sleep(100);
      drift = await rig.backend.check(view(spec(1), dataplane));
    }
    expect(drift.map((d) => d.kind)).to.include('port-down');
    await sleep(500);

    const logged = sink.bytes - before;
    // 20,000 messages of 1,000 characters: over 20 MB if each were a line.
    expect(logged, `${logged} bytes logged`).to.be.lessThan(64 * 1024);
    const flood = sink.lines.filter((l) => l.includes('port state changed'));
    expect(flood.length).to.be.within(1, 100);
    for (const line of sink.lines) expect(line.length).to.be.lessThan(PORT_STATUS_MESSAGE_MAX + 1024);
    expect(sink.lines.some((l) => l.includes('agent port statuses dropped'))).to.equal(true);
    const end = agent.isEnded ? await agent.ended : undefined;
    expect(end, 'the agent keeps its session').to.equal(undefined);
  });
});

describe('port status gate', () => {
  const status = (
    state: PortOperState,
    message = '',
  ): { name: string; operState: PortOperState; message: string } => ({
    name: 'w/eth0',
    operState: state,
    message,
  });

  it('drops a repeat of the last state passed on, and passes a change', () => {
    const gate = new PortStatusGate();
    expect(gate.offer(status(PortOperState.PORT_OPER_STATE_UP))).to.not.equal(undefined);
    expect(gate.offer(status(PortOperState.PORT_OPER_STATE_UP))).to.equal(undefined);
    expect(gate.offer(status(PortOperState.PORT_OPER_STATE_DOWN))).to.not.equal(undefined);
    expect(gate.takeCounts()).to.deep.equal({ duplicates: 1, limited: 0 });
  });

  it('holds back changes over the per-port rate and passes the newest once the rate allows', () => {
    let t = 0;
    const gate = new PortStatusGate(
      { perPortPerSecond: 1, perPortBurst: 2, totalPerSecond: 1000, totalBurst: 1000, maxPorts: 10 },
      () => t,
    );
    const up = PortOperState.PORT_OPER_STATE_UP;
    const down = PortOperState.PORT_OPER_STATE_DOWN;
    expect(gate.offer(status(up))).to.not.equal(undefined);
    expect(gate.offer(status(down))).to.not.equal(undefined);
    expect(gate.offer(status(up))).to.equal(undefined);
    expect(gate.offer(status(down, 'newest'))).to.equal(undefined);
    expect(gate.due()).to.deep.equal([]);
    t = 1000;
    expect(gate.due()).to.deep.equal([status(down, 'newest')]);
    expect(gate.due()).to.deep.equal([]);
  });

  it('cuts the agent text to a bounded length and says how much was cut', () => {
    const gate = new PortStatusGate();
    const passed = gate.offer(status(PortOperState.PORT_OPER_STATE_UP, 'y'.repeat(5000)));
    expect(passed?.message).to.have.length.lessThan(PORT_STATUS_MESSAGE_MAX + 40);
    expect(passed?.message).to.match(/… \(4744 more characters\)$/);
  });
});
