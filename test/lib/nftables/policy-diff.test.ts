import { expect } from 'chai';
import { diffScript } from '../../../lib/nftables/policy-diff';
import {
  PolicyProgramError,
  type NftPodPolicy,
  type NftPolicyProgram,
} from '../../../lib/nftables/policy-program';
import { podChainName, renderProgram, setNames, stateOf } from '../../../lib/nftables/policy-ruleset';

// The ruleset a program renders to, and the transaction from one program to the next, without a kernel.

const web: NftPodPolicy = {
  key: 'w1/eth0',
  hostIf: 'wn1',
  ingress: {
    rules: [
      {
        sets: ['s'],
        ports: [
          { protocol: 'TCP', port: 80 },
          { protocol: 'SCTP', port: 5000, endPort: 5010 },
        ],
      },
      { sets: [], ports: [{ protocol: 'UDP' }] },
      { ports: [] },
    ],
  },
};

const prog = (s: string[], pods: NftPodPolicy[] = [web]): NftPolicyProgram => ({
  sets: new Map([['s', s]]),
  pods: new Map(pods.map((p) => [p.key, p])),
});

describe('nftables policy ruleset and diff', () => {
  it('renders a rule per set family and port, returning, and a counted drop last', () => {
    const chain = renderProgram(prog(['10.0.0.0/24'])).chains.get(podChainName(web.key, 'ingress'));
    const s = setNames('s');
    expect(chain?.rules.map((r) => r.replace(/ comment .*/, ''))).to.deep.equal([
      `ip saddr @${s.v4} tcp dport 80 return`,
      `ip saddr @${s.v4} sctp dport 5000-5010 return`,
      `ip6 saddr @${s.v6} tcp dport 80 return`,
      `ip6 saddr @${s.v6} sctp dport 5000-5010 return`,
      `counter name ${podChainName(web.key, 'ingress')} drop`,
    ]);
  });

  it('changes only set elements when an address moves, never the chains', () => {
    const before = renderProgram(prog(['10.0.0.1/32', 'fd00::1/128']));
    const after = renderProgram(prog(['10.0.0.2/32', 'fd00::1/128']));
    const s = setNames('s');
    expect(diffScript(stateOf(before), after)).to.equal(
      `delete element inet workloadnet_policy ${s.v4} { 10.0.0.1/32 }\n` +
        `add element inet workloadnet_policy ${s.v4} { 10.0.0.2/32 }\n`,
    );
    expect(diffScript(stateOf(after), after)).to.equal('');
  });

  it("deletes a pod's chains only after the map elements that jump to them", () => {
    const before = renderProgram(prog([]));
    const script = diffScript(stateOf(before), renderProgram(prog([], [])));
    const chain = podChainName(web.key, 'ingress');
    expect(script.indexOf('delete element inet workloadnet_policy ingress_pods { "wn1" }')).to.be.lessThan(
      script.indexOf(`delete chain inet workloadnet_policy ${chain}`),
    );
    expect(script).to.contain(`delete counter inet workloadnet_policy ${chain}`);
  });

  it('refuses a malformed prefix, an unknown set and a bad interface name, in words', () => {
    expect(() => renderProgram(prog(['10.0.0.1/33']))).to.throw(
      PolicyProgramError,
      /address set s: .*prefix length/,
    );
    const unknown: NftPodPolicy = { key: 'k', hostIf: 'x', egress: { rules: [{ sets: ['nope'] }] } };
    expect(() => renderProgram(prog([], [unknown]))).to.throw(PolicyProgramError, /names address set nope/);
    const longName: NftPodPolicy = { key: 'k', hostIf: 'a-name-too-long-for-linux' };
    expect(() => renderProgram(prog([], [longName]))).to.throw(
      PolicyProgramError,
      /not a Linux interface name/,
    );
    const range: NftPodPolicy = {
      key: 'k',
      hostIf: 'x',
      egress: { rules: [{ ports: [{ protocol: 'TCP', port: 90, endPort: 80 }] }] },
    };
    expect(() => renderProgram(prog([], [range]))).to.throw(PolicyProgramError, /endPort 80/);
  });
});
