import { expect } from 'chai';
import { PolicyBook } from '../../../core/policy/policy-book';
import { compilePolicy, type LocalPod } from '../../../core/policy/policy-compiler';
import type { PolicyProtocol, PolicyState } from '../../../core/policy-source';
import {
  CASE_POD_KEYS,
  POLICY_CASES,
  type ProbePort,
  applyCaseStep,
  caseState,
  expectedReachable,
  fixedAddress,
} from '../../support/policy-cases';
import { referenceAllows } from '../../support/policy-reference';
import { compiledAllows } from './compiled-evaluator';

// The upstream e2e cases, every pair and probe of every step: the reference evaluator agrees with what
// each case states, and the compiled program (all nine pods on this node) does what the reference says.

function locals(state: PolicyState): LocalPod[] {
  return CASE_POD_KEYS.map((k) => ({
    key: `${k}/eth0`,
    hostIf: `veth-${k.replace('/', '-')}`,
    ips: [fixedAddress(k)],
    pod: state.pods.get(k)!,
  }));
}

describe('policy compiler: the upstream e2e cases', () => {
  for (const c of POLICY_CASES) {
    it(`enforces "${c.name}" as upstream expects, step by step`, () => {
      let state = caseState(fixedAddress);
      const book = new PolicyBook(state, locals(state), { localRanges: ['10.77.0.0/16'] });
      const mismatches: string[] = [];
      for (const step of c.steps) {
        const next = applyCaseStep(state, step, fixedAddress);
        state = next.state;
        for (const change of next.changes) book.sourceChanged(change, state);
        const program = compilePolicy(state, locals(state), { localRanges: ['10.77.0.0/16'] });
        const incremental = book.program();
        for (const from of CASE_POD_KEYS) {
          for (const to of CASE_POD_KEYS) {
            if (from === to) continue;
            for (const probe of step.probes) {
              const [port, protocol] = probe.split('/') as [string, PolicyProtocol];
              const f = { pod: from, ip: fixedAddress(from) };
              const t = { pod: to, ip: fixedAddress(to) };
              const stated = expectedReachable(step, from, to, probe as ProbePort);
              const ref = referenceAllows(state, f, t, protocol, Number(port));
              const got = compiledAllows(program, f.ip, t.ip, protocol, Number(port));
              const inc = compiledAllows(incremental, f.ip, t.ip, protocol, Number(port));
              if (ref !== stated || got !== stated || inc !== stated) {
                mismatches.push(
                  `${step.what}: ${from} -> ${to} ${probe}: stated ${stated}, reference ${ref}, compiled ${got}, incremental ${inc}`,
                );
              }
            }
          }
        }
      }
      expect(mismatches).to.deep.equal([]);
    });
  }
});
