import { expect } from 'chai';
import { PolicyBook } from '../../../core/policy/policy-book';
import type { LocalPod } from '../../../core/policy/policy-compiler';
import type { PolicyState } from '../../../core/policy-source';
import { caseState, fixedAddress, casePolicy, casePod } from '../../support/policy-cases';

// What a change reports as touched: a label change edits the elements of the sets that select the
// pod and leaves every pod's rules alone; a policy change touches the pods it selects.

function book(state: PolicyState): PolicyBook {
  const xa = state.pods.get('x/a')!;
  const local: LocalPod = { key: 'xa/eth0', hostIf: 'veth-xa', ips: xa.ips, pod: xa };
  return new PolicyBook(state, [local], { localRanges: ['10.77.1.0/24'] });
}

describe('policy book: what a change touches', () => {
  const base = caseState(fixedAddress);
  const policy = casePolicy(
    'x/clients',
    { matchLabels: { pod: 'a' } },
    {
      ingress: [{ peers: [{ namespaceSelector: {}, podSelector: { matchLabels: { role: 'client' } } }] }],
    },
  );
  const state: PolicyState = { ...base, policies: new Map([['x/clients', policy]]) };

  it("edits only the set a label change selects into, never a pod's rules", () => {
    const b = book(state);
    const before = b.program();
    const pods = new Map(state.pods).set(
      'y/b',
      casePod('y/b', fixedAddress('y/b'), { pod: 'b', role: 'client' }),
    );
    const touched = b.sourceChanged({ kind: 'pod', key: 'y/b' }, { ...state, pods });
    const after = b.program();
    expect([...touched.pods]).to.deep.equal([]);
    expect([...touched.sets]).to.deep.equal([...before.sets.keys()]);
    expect([...after.sets.values()]).to.deep.equal([['10.77.2.2/32']]);
    expect(after.pods.get('xa/eth0')).to.deep.equal(before.pods.get('xa/eth0'));
  });

  it('touches the pod and removes the set when the policy goes', () => {
    const b = book(state);
    const setNames = [...b.program().sets.keys()];
    const touched = b.sourceChanged({ kind: 'policy', key: 'x/clients' }, base);
    expect([...touched.pods]).to.deep.equal(['xa/eth0']);
    expect([...touched.sets]).to.deep.equal(setNames);
    expect(b.program().pods.size).to.equal(0);
    expect(b.program().sets.size).to.equal(0);
  });

  it('stops trusting a remote pod with an address in a range the node is given later', () => {
    const b = book(state);
    // y/b states an address of 10.77.9.0/24, which is no range of this node yet: trusted.
    const claimant = casePod('y/b', '10.77.9.5', { pod: 'b', role: 'client' });
    const pods = new Map(state.pods).set('y/b', claimant);
    b.sourceChanged({ kind: 'pod', key: 'y/b' }, { ...state, pods });
    expect([...b.program().sets.values()]).to.deep.equal([['10.77.9.5/32']]);
    expect([...b.rangesChanged(['10.77.9.0/24', '10.77.1.0/24']).sets]).to.have.length(1);
    expect([...b.program().sets.values()]).to.deep.equal([[]]);
    // The same ranges again, in another order, touch nothing.
    expect(b.rangesChanged(['10.77.1.0/24', '10.77.9.0/24']).sets.size).to.equal(0);
  });

  it('gives the whole program from its first build', () => {
    expect(book(state).program().pods.has('xa/eth0')).to.equal(true);
  });
});
