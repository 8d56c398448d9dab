import { expect } from 'chai';
import { adoptedPodOf, localPodOf, type PolicyRow } from '../../../core/policy/local-pods';
import type { PolicyPod, PolicyState } from '../../../core/policy-source';

// A recorded attachment as a NetworkPolicy pod: by the identity its CNI ADD gave, or, for one adopted
// after the state store was lost, by the one pod of this node that reports its address.

function pod(name: string, ips: string[], over: Partial<PolicyPod> = {}): PolicyPod {
  return {
    namespace: 'x',
    name,
    uid: `u-${name}`,
    labels: { pod: name },
    ips,
    namedPorts: [],
    nodeName: 'n1',
    hostNetwork: false,
    ...over,
  };
}

function state(...pods: PolicyPod[]): PolicyState {
  return {
    namespaces: new Map(),
    pods: new Map(pods.map((p) => [`${p.namespace}/${p.name}`, p])),
    policies: new Map(),
  };
}

const ADOPTED: PolicyRow = {
  key: 'sandbox1/eth0',
  origin: 'adopted',
  ips: [{ address: '10.1.0.5' }],
  dataplane: { hostIfName: 'wn1234' },
};

describe('NetworkPolicy: the pods of recorded attachments', () => {
  it('gives an adopted attachment the one pod of this node that reports its address, with its labels', () => {
    const local = adoptedPodOf(ADOPTED, state(pod('a', ['10.1.0.5']), pod('b', ['10.1.0.6'])), 'n1');
    expect(local).to.deep.include({ key: 'sandbox1/eth0', hostIf: 'wn1234', ips: ['10.1.0.5'] });
    expect(local?.pod.labels).to.deep.equal({ pod: 'a' });
  });

  it('takes no claim from a pod of another node, a host-network pod, or two pods stating one address', () => {
    expect(adoptedPodOf(ADOPTED, state(pod('a', ['10.1.0.5'], { nodeName: 'n2' })), 'n1')).to.equal(
      undefined,
    );
    expect(adoptedPodOf(ADOPTED, state(pod('a', ['10.1.0.5'], { hostNetwork: true })), 'n1')).to.equal(
      undefined,
    );
    expect(adoptedPodOf(ADOPTED, state(pod('a', ['10.1.0.5']), pod('b', ['10.1.0.5'])), 'n1')).to.equal(
      undefined,
    );
  });

  it('names no pod for an attachment that was not adopted, or that the source has no pod for', () => {
    const attached: PolicyRow = { ...ADOPTED, origin: 'attach' };
    expect(adoptedPodOf(attached, state(pod('a', ['10.1.0.5'])), 'n1')).to.equal(undefined);
    expect(adoptedPodOf(ADOPTED, state(pod('a', ['10.1.0.9'])), 'n1')).to.equal(undefined);
    expect(localPodOf(ADOPTED, state(pod('a', ['10.1.0.5'])))).to.equal(undefined);
  });
});
