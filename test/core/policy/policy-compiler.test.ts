import { expect } from 'chai';
import { setName } from '../../../core/policy/address-sets';
import { compilePolicy, type LocalPod } from '../../../core/policy/policy-compiler';
import type { NetworkPolicy, PolicyPod, PolicyState } from '../../../core/policy-source';

const OPTIONS = { localRanges: ['10.1.0.0/24'] };

function pod(
  key: string,
  ip: string,
  labels: Record<string, string>,
  extra: Partial<PolicyPod> = {},
): PolicyPod {
  const [namespace, name] = key.split('/') as [string, string];
  return {
    namespace,
    name,
    uid: `u-${name}`,
    labels,
    ips: [ip],
    namedPorts: [],
    nodeName: 'n',
    hostNetwork: false,
    ...extra,
  };
}
function local(p: PolicyPod, ip = p.ips[0]!): LocalPod {
  return { key: `${p.name}/eth0`, hostIf: `v-${p.name}`, ips: [ip], pod: p };
}
function state(pods: PolicyPod[], policies: NetworkPolicy[]): PolicyState {
  return {
    namespaces: new Map([
      ['a', { name: 'a', labels: { ns: 'a' } }],
      ['b', { name: 'b', labels: { ns: 'b' } }],
    ]),
    pods: new Map(pods.map((p) => [`${p.namespace}/${p.name}`, p])),
    policies: new Map(policies.map((p) => [`${p.namespace}/${p.name}`, p])),
  };
}
function policy(name: string, p: Partial<NetworkPolicy>): NetworkPolicy {
  return { namespace: 'a', name, podSelector: {}, policyTypes: ['Ingress'], ingress: [], egress: [], ...p };
}

const server = pod(
  'a/server',
  '10.1.0.2',
  { app: 'server' },
  { namedPorts: [{ name: 'http', protocol: 'TCP', port: 8080 }] },
);
const client = pod('a/client', '10.2.0.3', { app: 'client' });
const other = pod(
  'b/other',
  '10.2.0.4',
  { app: 'client' },
  { namedPorts: [{ name: 'http', protocol: 'TCP', port: 9090 }] },
);

describe('policy compiler: rules and sets per pod', () => {
  it('leaves out a pod no policy isolates, and isolates each direction on its own', () => {
    const s = state([server, client], [policy('in', { podSelector: { matchLabels: { app: 'server' } } })]);
    const out = compilePolicy(s, [local(server)], OPTIONS);
    expect(out.pods.get('server/eth0')).to.deep.include({ ingress: { rules: [] }, policies: ['a/in'] });
    expect(out.pods.get('server/eth0')).to.not.have.property('egress');
    const none = compilePolicy(state([server], []), [local(server)], OPTIONS);
    expect(none.pods.size).to.equal(0);
  });

  it('unions the rules of every policy selecting the pod, in policy order', () => {
    const rule = (app: string) => ({ peers: [{ podSelector: { matchLabels: { app } } }] });
    const s = state(
      [server, client],
      [policy('p2', { ingress: [rule('client')] }), policy('p1', { ingress: [rule('x')] })],
    );
    const pp = compilePolicy(s, [local(server)], OPTIONS).pods.get('server/eth0')!;
    expect(pp.policies).to.deep.equal(['a/p1', 'a/p2']);
    expect(pp.ingress!.rules).to.have.length(2);
  });

  it('names one shared set for identical selectors in two policies, with the pods it selects', () => {
    const peer = { podSelector: { matchLabels: { app: 'client' } }, namespaceSelector: {} };
    const s = state(
      [server, client, other],
      [policy('p1', { ingress: [{ peers: [peer] }] }), policy('p2', { ingress: [{ peers: [peer] }] })],
    );
    const out = compilePolicy(s, [local(server)], OPTIONS);
    expect([...out.sets.values()]).to.deep.equal([['10.2.0.3/32', '10.2.0.4/32']]);
    const name = [...out.sets.keys()][0]!;
    expect(name).to.match(/^[a-z0-9_]{1,24}$/);
    expect(name).to.equal(
      setName({
        kind: 'pods',
        peer: { podSelector: { matchLabels: { app: 'client' } }, namespaceSelector: {} },
      }),
    );
  });

  it('resolves an ingress named port on the local pod, and a missing one allows nothing', () => {
    const s = state(
      [server],
      [policy('p', { ingress: [{ ports: [{ port: 'http' }] }, { ports: [{ port: 'nope' }] }] })],
    );
    const rules = compilePolicy(s, [local(server)], OPTIONS).pods.get('server/eth0')!.ingress!.rules;
    expect(rules).to.deep.equal([{ ports: [{ protocol: 'TCP', port: 8080 }] }]);
  });

  it('makes an egress named port one rule per number it resolves to on the peers', () => {
    const egress = policy('e', {
      policyTypes: ['Egress'],
      podSelector: { matchLabels: { app: 'client' } },
      egress: [{ peers: [{ namespaceSelector: {} }], ports: [{ port: 'http' }] }],
    });
    const c = pod('a/c2', '10.1.0.9', { app: 'client' });
    const out = compilePolicy(state([server, other, c], [egress]), [local(c), local(server)], OPTIONS);
    const rules = out.pods.get('c2/eth0')!.egress!.rules;
    expect(rules.map((r) => r.ports)).to.deep.equal([
      [{ protocol: 'TCP', port: 8080 }],
      [{ protocol: 'TCP', port: 9090 }],
    ]);
    expect(rules.map((r) => out.sets.get(r.sets![0]!))).to.deep.equal([['10.1.0.2/32'], ['10.2.0.4/32']]);
  });

  it('matches nothing for a named port with an ipBlock peer', () => {
    const egress = policy('e', {
      policyTypes: ['Egress'],
      egress: [{ peers: [{ ipBlock: { cidr: '0.0.0.0/0' } }], ports: [{ port: 'http' }] }],
    });
    const out = compilePolicy(state([server, other], [egress]), [local(server)], OPTIONS);
    expect(out.pods.get('server/eth0')!.egress!.rules).to.deep.equal([]);
  });

  it('keeps endPort ranges and defaults the protocol to TCP', () => {
    const s = state(
      [server],
      [policy('p', { ingress: [{ ports: [{ port: 80, endPort: 90 }, { protocol: 'SCTP' }] }] })],
    );
    const rules = compilePolicy(s, [local(server)], OPTIONS).pods.get('server/eth0')!.ingress!.rules;
    expect(rules).to.deep.equal([
      { ports: [{ protocol: 'TCP', port: 80, endPort: 90 }, { protocol: 'SCTP' }] },
    ]);
  });
});

describe('policy compiler: whom it trusts with an address', () => {
  const everyone = policy('all', {
    podSelector: { matchLabels: { app: 'server' } },
    ingress: [{ peers: [{ namespaceSelector: {} }] }],
  });
  const elements = (pods: PolicyPod[], locals: LocalPod[]) =>
    [...compilePolicy(state(pods, [everyone]), locals, OPTIONS).sets.values()][0];

  it('keeps a stale record of another pod out of a set under an address of this node', () => {
    const stale = pod('b/stale', '10.1.0.2', { app: 'x' });
    expect(elements([server, stale], [local(server)])).to.deep.equal(['10.1.0.2/32']);
    const liar = pod('b/liar', '10.1.0.77', { app: 'x' });
    expect(elements([server, liar], [local(server)])).to.deep.equal(['10.1.0.2/32']);
  });

  it('knows a local pod by the addresses allocated here, not by what its record says', () => {
    const record = { ...server, ips: ['10.2.9.9'] };
    expect(elements([record], [local(server, '10.1.0.2')])).to.deep.equal(['10.1.0.2/32']);
  });

  it('puts hostNetwork pods and pods without addresses in no set', () => {
    const host = pod('b/host', '192.168.0.5', {}, { hostNetwork: true });
    const pending = pod('b/pending', '', {}, { ips: [] });
    expect(elements([server, host, pending], [local(server)])).to.deep.equal(['10.1.0.2/32']);
  });

  it('uses the local pod value when the source holds another pod (another uid) of that name', () => {
    const newer = { ...server, uid: 'other', labels: { app: 'nothing' } };
    const out = compilePolicy(state([newer], [everyone]), [local(server)], OPTIONS);
    expect(out.pods.get('server/eth0')!.policies).to.deep.equal(['a/all']);
  });
});
