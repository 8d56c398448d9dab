import { expect } from 'chai';
import { diffPolicy, diffScript, onlyElements } from '../../../lib/nftables/policy-diff';
import {
  PolicyProgramError,
  type NftPodPolicy,
  type NftPolicyProgram,
} from '../../../lib/nftables/policy-program';
import { renderProgram, setNames, stateOf, type DesiredRuleset } from '../../../lib/nftables/policy-ruleset';

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

/** The name of the chain `pod`'s ingress jumps to. */
function ingressChain(desired: DesiredRuleset, pod = web): string {
  const chains = [...(desired.byPod.get(pod.key) ?? new Map()).entries()];
  return chains.find(([, c]) => c.direction === 'ingress')?.[0] ?? 'none';
}

describe('nftables policy ruleset and diff', () => {
  it('renders a rule per set family and port, returning, and a counted drop last', () => {
    const desired = renderProgram(prog(['10.0.0.0/24']));
    const chain = desired.chains.get(ingressChain(desired));
    const s = { v4: setNames('s', true).v4, v6: setNames('s').v6 };
    expect(chain?.rules.map((r) => r.replace(/ comment .*/, ''))).to.deep.equal([
      `ip saddr @${s.v4} tcp dport 80 return`,
      `ip saddr @${s.v4} sctp dport 5000-5010 return`,
      `ip6 saddr @${s.v6} tcp dport 80 return`,
      `ip6 saddr @${s.v6} sctp dport 5000-5010 return`,
      'oifname @ingress_denied drop',
      'drop',
    ]);
  });

  it('changes only set elements when an address moves, never the chains', () => {
    const before = renderProgram(prog(['10.0.0.1/32', 'fd00::1/128']));
    const after = renderProgram(prog(['10.0.0.2/32', 'fd00::1/128']));
    const s = setNames('s');
    expect(diffScript(stateOf(before), after)).to.equal(
      `delete element inet workloadnet_policy ${s.v4} { 10.0.0.1 }\n` +
        `add element inet workloadnet_policy ${s.v4} { 10.0.0.2 }\n`,
    );
    expect(diffScript(stateOf(after), after)).to.equal('');
  });

  it('keeps sets of host addresses as hash sets and gives only real prefixes an interval set', () => {
    const script = diffScript(undefined, renderProgram(prog(['10.0.0.1/32', 'fd00::/64'])));
    const hosts = setNames('s');
    const prefixes = setNames('s', true);
    expect(script).to.contain(`add set inet workloadnet_policy ${hosts.v4} { type ipv4_addr; comment`);
    expect(script).to.contain(`add element inet workloadnet_policy ${hosts.v4} { 10.0.0.1 }`);
    expect(script).to.contain(
      `add set inet workloadnet_policy ${prefixes.v6} { type ipv6_addr; flags interval; comment`,
    );
    expect(script).to.contain(`add element inet workloadnet_policy ${prefixes.v6} { fd00::/64 }`);
  });

  it('re-creates a set whose content needs the other kind, moving its pods to new chains before the old set goes', () => {
    const before = renderProgram(prog(['10.0.0.1/32']));
    const after = renderProgram(prog(['10.0.0.0/24']));
    const script = diffScript(stateOf(before), after);
    const [old, chain] = [ingressChain(before), ingressChain(after)];
    const order = [
      `add set inet workloadnet_policy ${setNames('s', true).v4} { type ipv4_addr; flags interval;`,
      `add element inet workloadnet_policy ${setNames('s', true).v4} { 10.0.0.0/24 }`,
      `add rule inet workloadnet_policy ${chain} ip saddr @${setNames('s', true).v4} tcp dport 80`,
      `add element inet workloadnet_policy ingress_pods { "wn1" : jump ${chain} }`,
      `delete chain inet workloadnet_policy ${old}`,
      `delete set inet workloadnet_policy ${setNames('s').v4}`,
    ].map((line) => script.indexOf(line));
    expect(order.every((at) => at >= 0)).to.equal(true, script);
    expect(order).to.deep.equal([...order].sort((a, b) => a - b));
    expect(script).to.not.contain(`delete set inet workloadnet_policy ${setNames('s').v6}`);
  });

  it("deletes a pod's chains only after the map elements that jump to them", () => {
    const before = renderProgram(prog([]));
    const script = diffScript(stateOf(before), renderProgram(prog([], [])));
    const chain = ingressChain(before);
    expect(script.indexOf('delete element inet workloadnet_policy ingress_pods { "wn1" }')).to.be.lessThan(
      script.indexOf(`delete chain inet workloadnet_policy ${chain}`),
    );
    expect(script).to.contain('delete element inet workloadnet_policy ingress_denied { "wn1" }');
    expect(script).to.not.contain('delete counter');
  });

  it('gives pods with the same rules one chain, so that another such pod is only map and set elements', () => {
    const twin = (n: number): NftPodPolicy => ({ ...web, key: `w${n}/eth0`, hostIf: `wn${n}` });
    const two = renderProgram(prog(['10.0.0.1/32'], [web, twin(2)]));
    expect(ingressChain(two, twin(2))).to.equal(ingressChain(two));
    expect([...two.chains.keys()].filter((c) => c !== 'forward')).to.have.length(1);
    const three = renderProgram(prog(['10.0.0.1/32', '10.0.0.3/32'], [web, twin(2), twin(3)]));
    const diff = diffPolicy(stateOf(two), three);
    expect(onlyElements(diff), diffScript(stateOf(two), three)).to.equal(true);
    expect(diff.maps).to.deep.include({
      name: 'ingress_pods',
      gone: [],
      added: ['wn3'],
      jumps: new Map([['wn3', ingressChain(two)]]),
    });
    // One of them given other rules jumps to a chain of its own; the shared one stays for the others.
    const moved = renderProgram(prog(['10.0.0.1/32'], [web, { ...twin(2), ingress: { rules: [] } }]));
    const script = diffScript(stateOf(two), moved);
    expect(script).to.contain(
      `add element inet workloadnet_policy ingress_pods { "wn2" : jump ${ingressChain(moved, twin(2))} }`,
    );
    expect(script).to.not.contain(`delete chain inet workloadnet_policy ${ingressChain(two)}`);
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
