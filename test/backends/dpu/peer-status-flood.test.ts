import { expect } from 'chai';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { status as grpcStatus } from '@grpc/grpc-js';
import { createLogger } from '../../../core/logger';
import type { PeerState, PeerStatus } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { attachTo } from '../../support/attach-spec';
import { okAck, spec } from '../../support/dpu-fixtures';
import { fabricUpserts, snapshot, v3Hello } from './fabric-stream';
import { RawAgent } from '../../support/raw-agent';
import { sleep, waitUntil } from '../../support/sim-process';
import { rawAgentBackend } from '../../support/raw-agent-backend';
import { LogSink } from '../../support/log-sink';
import { peerState } from '../../support/peer-status';
import { VXLAN_SETTINGS, n3 } from '../../support/fabric-fixtures';

// A rogue agent reports peers it was never sent, each message naming thousands not named before.
// Before: the daemon kept every one (78 to 510 MB in 32 s), also after the session ended, and took
// 5,000-peer messages every 5 ms with no rate limit. Now such entries are counted and dropped, and a
// PeerStatus flood is coalesced and then ends the stream, as a heartbeat flood does.
//
// Memory is measured in this process (the backend runs in it): the V8 heap after full collections,
// before and after, since the book lives on that heap; RSS is reported beside it.

const MIB = 1024 * 1024;
const BOUND = 20 * MIB;

function heapAfterGc(): number {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as (() => void) | undefined;
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed;
}

const state = (name: string, txPackets = 0): PeerState => peerState(name, true, txPackets);

let strangers = 0;
/** A delta naming `n` peers no one has named before, and peer/n3 with `tx` packets. */
function rogue(n: number, tx: number): PeerStatus {
  const peers = Array.from({ length: n }, () => state(`peer/rogue-${++strangers}`));
  return { peers: [state('peer/n3', tx), ...peers], delta: true, gone: [] };
}

describe('DPU backend: an agent reporting peers it was never sent', function () {
  this.timeout(120_000);
  let sink: LogSink;
  const rig = rawAgentBackend({
    backend: () => ({ nodeName: 'n1', logger: createLogger('info', (sink = new LogSink())) }),
    fabric: VXLAN_SETTINGS,
  });
  let agent: RawAgent;

  beforeEach(async () => {
    agent = rig.connect(v3Hello('dpu-rogue'));
    await agent.next((m) => !!m.helloAccept, 'hello accept');
    await snapshot(agent);
    await rig.backend.fabric.apply([n3], { ranges: ['10.244.0.0/24'], byEndpoint: new Map() });
    await waitUntil(() => fabricUpserts(agent).some((o) => o.name === 'peer/n3'), 'peer/n3 sent');
    agent.send({ peerStatus: { peers: [state('peer/n3')], delta: false, gone: [] } });
  });

  const txOfN3 = (): number | undefined =>
    rig.backend.fabric.report().peers.find((p) => p.node === 'n3')?.seenBy?.[0]?.txPackets;
  const note = async (): Promise<string> =>
    (await rig.backend.health()).dpus?.find((d) => d.id === 'dpu-rogue')?.fabric?.note ?? '';

  async function attachMs(i: number): Promise<number> {
    const started = performance.now();
    const from = agent.received.length;
    const attaching = attachTo(rig.backend, spec(i));
    const up = await agent.next((m) => !!m.upsert?.port, 'the port upsert', 5000, from);
    agent.send(okAck(up.upsert!.port!.name, up.upsert!.port!.generation));
    await attaching;
    return performance.now() - started;
  }

  it('keeps none of them: the heap grows by less than 20 MiB over 400,000 names, and Status says how many were dropped', async () => {
    await waitUntil(() => txOfN3() === 0, 'the first PeerStatus');
    const before = heapAfterGc();
    const rssBefore = process.memoryUsage().rss;
    const calm = await attachMs(1);
    // Within the rate (a few per heartbeat interval): what is measured is what the daemon keeps.
    const messages = 20;
    const each = 20_000;
    let during = 0;
    for (let i = 1; i <= messages; i++) {
      agent.send({ peerStatus: rogue(each, i) });
      if (i === messages / 2) during = await attachMs(2);
      else await sleep(60);
    }
    await waitUntil(() => txOfN3() === messages, 'the last message taken', 30_000);
    const grown = heapAfterGc() - before;
    const rssGrown = process.memoryUsage().rss - rssBefore;
    const figures = `heap +${(grown / MIB).toFixed(1)} MiB, RSS +${(rssGrown / MIB).toFixed(1)} MiB`;
    console.log(
      `      ${messages * each} unknown names: ${figures}; attach ${calm.toFixed(0)} ms calm, ${during.toFixed(0)} ms mid-flood`,
    );
    expect(grown, figures).to.be.lessThan(BOUND);
    expect(during, 'an Attach in the middle of the flood').to.be.lessThan(2000);

    expect(await note()).to.include(
      `dropped ${messages * each} PeerStatus entries naming peers it was never sent`,
    );
    const said = sink.lines.filter((l) => l.includes('the agent reported peers it was never sent'));
    expect(said.length, 'said in words, at most once per interval').to.be.within(1, 3);
    expect(agent.isEnded, 'a rogue within the rate keeps its session').to.equal(false);
  });

  it('ends the stream of an agent flooding PeerStatus, and keeps nothing of the flood', async () => {
    await waitUntil(() => txOfN3() === 0, 'the first PeerStatus');
    const before = heapAfterGc();
    // 100-name messages as fast as the daemon reads them, 5,000 unless it ends the stream first. The
    // agent runs in this process: it queues only a few, so that the heap measured is the daemon's.
    let sent = 0;
    const started = performance.now();
    while (sent < 5000 && !agent.isEnded) {
      agent.send({ peerStatus: rogue(100, ++sent) });
      while (agent.queued > 20 && !agent.isEnded) await sleep(1);
    }
    const end = await agent.end(30_000);
    expect(end.code).to.equal(grpcStatus.RESOURCE_EXHAUSTED);
    expect(end.details).to.match(/^PeerStatus flood: \d+ messages over the limit of 10 per 200 ms$/);
    await waitUntil(async () => (await note()).startsWith('away'), 'the agent shown away');
    agent.close();
    await sleep(100);
    const grown = heapAfterGc() - before;
    console.log(
      `      ended after ${sent} messages in ${(performance.now() - started).toFixed(0)} ms: heap +${(grown / MIB).toFixed(1)} MiB`,
    );
    expect(grown, `heap +${(grown / MIB).toFixed(1)} MiB`).to.be.lessThan(BOUND);
    // A lost agent's word is no evidence: Status no longer says how it saw n3.
    expect(txOfN3()).to.equal(undefined);
    expect(await note()).to.match(/how it sees its peers is unknown until it is back/);
  });
});
