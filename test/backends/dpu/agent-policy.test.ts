import { expect } from 'chai';
import { AgentPolicy } from '../../../backends/dpu/policy/agent-policy';
import type { PolicyBody } from '../../../backends/dpu/policy/policy-wire';

// One agent's policy objects: sent once while unchanged, and sent again after a timeout for whatever
// the agent never confirmed, so that an apply never passes on objects the agent does not hold.

const body = (name: string, prefixes: string[]): PolicyBody => ({ name, addressSet: { prefixes } });

describe('DPU agent policy objects', () => {
  let generation = 0;
  const next = (): number => ++generation;
  const plan = new Map([['set/a', body('set/a', ['10.0.0.1/32'])]]);

  it('sends an unchanged plan once', () => {
    const agent = new AgentPolicy('d1');
    expect(agent.set(plan, next).upserts.map((o) => o.name)).to.deep.equal(['set/a']);
    expect(agent.set(plan, next).upserts).to.deep.equal([]);
  });

  it('sends again, after a timeout, what the agent never confirmed; keeps it for the snapshot after a lost session', async () => {
    const timedOut = new AgentPolicy('d1');
    const [sent] = timedOut.set(plan, next).upserts;
    const waiting = timedOut.wait('set/a', sent!.generation).catch((e: Error) => e.message);
    timedOut.failAll(() => new Error('no ack in time'), true);
    expect(await waiting).to.equal('no ack in time');
    expect(timedOut.set(plan, next).upserts.map((o) => o.name)).to.deep.equal(['set/a']);

    const lost = new AgentPolicy('d2');
    const [kept] = lost.set(plan, next).upserts;
    const ended = lost.wait('set/a', kept!.generation).catch((e: Error) => e.message);
    lost.failAll(() => new Error('stream ended'));
    expect(await ended).to.equal('stream ended');
    expect(lost.set(plan, next).upserts).to.deep.equal([]);
    expect(lost.snapshot().map((o) => o.name)).to.deep.equal(['set/a']);
  });
});
