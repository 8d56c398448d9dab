import { expect } from 'chai';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import type { DpuBackend } from '../../../backends/dpu';
import { okAck, removeDir, scratchDir, spec, startBackend } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { sleep } from '../../support/sim-process';
import { attachTo } from '../../support/attach-spec';

// Agents are outside the daemon's trust: whatever one sends, the daemon logs it, refuses it, and keeps
// serving. Each case ends with a well-behaved agent being accepted, to show the daemon is still fine.

describe('DPU backend: bad agent input', function () {
  this.timeout(20_000);
  let dir: string;
  let backend: DpuBackend;
  let sock: string;
  const agents: RawAgent[] = [];

  function agent(): RawAgent {
    const a = new RawAgent(sock);
    agents.push(a);
    return a;
  }

  async function stillServes(): Promise<void> {
    const a = agent();
    a.send(RawAgent.hello('dpu-good'));
    await a.next((m) => !!m.helloAccept, 'hello accept of a well-behaved agent');
    a.close();
    await sleep(50);
  }

  beforeEach(async () => {
    dir = scratchDir();
    sock = path.join(dir, 'agent.sock');
    backend = await startBackend(dir, { heartbeatIntervalMs: 100, ackTimeoutMs: 2000 });
  });

  afterEach(async () => {
    for (const a of agents.splice(0)) a.close();
    await backend.stop();
    removeDir(dir);
  });

  it('ends a stream whose first message is not Hello with INVALID_ARGUMENT', async () => {
    const a = agent();
    a.send(okAck('x/eth0', 1));
    const end = await a.end();
    expect(end.code).to.equal(status.INVALID_ARGUMENT);
    expect(end.details).to.match(/first message must be Hello, got ack/);
    expect(a.received.some((m) => m.helloAccept)).to.equal(false);
    await stillServes();
  });

  it('ends a stream that says Hello twice', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1'));
    await a.next((m) => !!m.helloAccept, 'hello accept');
    a.send(RawAgent.hello('dpu-1'));
    const end = await a.end();
    expect(end.code).to.equal(status.INVALID_ARGUMENT);
    expect(end.details).to.match(/Hello was sent twice/);
    await stillServes();
  });

  it('rejects a hello with another protocol version, saying which one it speaks', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1', { protocolVersion: 7 }));
    const reject = await a.next((m) => !!m.helloReject, 'hello reject');
    expect(reject.helloReject?.reason).to.match(/protocol version 7 is not supported.*versions 1-4/);
    expect((await a.end()).code).to.equal(status.FAILED_PRECONDITION);
    await stillServes();
  });

  it('rejects a hello with an empty agent id', async () => {
    const a = agent();
    a.send(RawAgent.hello(''));
    const reject = await a.next((m) => !!m.helloReject, 'hello reject');
    expect(reject.helloReject?.reason).to.match(/agent_id/);
    expect((await a.end()).code).to.equal(status.INVALID_ARGUMENT);
  });

  it('ends a stream that never says Hello once the heartbeat timeout passes', async () => {
    const a = agent();
    a.send({ heartbeat: undefined });
    // An empty message is "not hello" too; a silent client is covered by the same timer.
    const end = await a.end();
    expect([status.INVALID_ARGUMENT, status.DEADLINE_EXCEEDED]).to.include(end.code);
    const b = agent();
    const t = Date.now();
    const silent = await b.end(3000);
    expect(silent.code).to.equal(status.DEADLINE_EXCEEDED);
    expect(silent.details).to.match(/no Hello within/);
    expect(Date.now() - t).to.be.lessThan(2000);
  });

  it('ignores acks for unknown port names and keeps the session', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1'));
    await a.next((m) => !!m.syncComplete, 'sync complete');
    for (let i = 0; i < 50; i++) {
      a.send(okAck(`nobody-${i}/eth0`, 99));
    }
    const seen = a.received.length;
    await a.next((m) => !!m.heartbeat, 'a heartbeat after the bogus acks', 2000, seen);
    expect(a.isEnded).to.equal(false);
    expect((await backend.health()).ready).to.equal(true);
  });

  it('ignores an ack for a stale generation and completes Attach only at the generation it sent', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1'));
    await a.next((m) => !!m.syncComplete, 'sync complete');
    // The pause below is two thirds of the 300 ms silence limit: heartbeats keep a slow run in session.
    a.keepAlive(50);
    let settled = false;
    const attach = attachTo(backend, spec(1)).finally(() => (settled = true));
    const up = await a.next((m) => !!m.upsert, 'the upsert');
    const port = up.upsert?.port;
    if (!port) throw new Error('upsert without a port');
    a.send(okAck(port.name, port.generation - 1));
    a.send(okAck(port.name, port.generation + 5));
    await sleep(200);
    expect(settled, 'attach completed on a wrong generation').to.equal(false);
    a.send(okAck(port.name, port.generation));
    const res = await attach;
    expect(res.details?.dpuGeneration).to.equal(port.generation);
    expect(a.isEnded).to.equal(false);
  });

  it('ends a stream that sends an oversize message with RESOURCE_EXHAUSTED', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1'));
    await a.next((m) => !!m.helloAccept, 'hello accept');
    a.send({ portStatus: { name: 'x'.repeat(5 * 1024 * 1024), operState: 1, message: '' } });
    const end = await a.end();
    expect(end.code).to.equal(status.RESOURCE_EXHAUSTED);
    await stillServes();
  });

  it('drops a heartbeat flood and then ends the stream with RESOURCE_EXHAUSTED', async () => {
    const a = agent();
    a.send(RawAgent.hello('dpu-1'));
    await a.next((m) => !!m.helloAccept, 'hello accept');
    // In chunks, so that this process (which also runs the daemon) keeps its own timers running.
    for (let i = 0; i < 5000 && !a.isEnded; i++) {
      a.send({ heartbeat: { seq: i, sentAtUnixMs: Date.now() } });
      if (i % 100 === 99) await sleep(1);
    }
    const end = await a.end();
    expect(end.code, end.details).to.equal(status.RESOURCE_EXHAUSTED);
    expect(end.details).to.match(/heartbeat flood/);
    await stillServes();
  });
});
