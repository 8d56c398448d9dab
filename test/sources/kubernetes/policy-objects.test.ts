import { expect } from 'chai';
import type { V1NetworkPolicy, V1Pod } from '@kubernetes/client-node';
import { podFromApi, policyFromApi } from '../../../sources/kubernetes/policy-objects';

// The Kubernetes objects as the policy model holds them: pods that hold addresses, policies checked as
// the API server checks them (refused whole, in words, when it would refuse them), the API's defaults.

const policy = (spec: unknown): V1NetworkPolicy =>
  ({ metadata: { namespace: 'x', name: 'p' }, spec }) as V1NetworkPolicy;

const refusal = (spec: unknown): string => {
  const c = policyFromApi(policy(spec));
  if (!c || !('refused' in c)) throw new Error(`not refused: ${JSON.stringify(c)}`);
  return c.refused;
};

const accepted = (spec: unknown): unknown => {
  const c = policyFromApi(policy(spec));
  if (!c || !('policy' in c)) throw new Error(`not accepted: ${JSON.stringify(c)}`);
  return c.policy;
};

const ingressFrom = (peer: unknown): unknown => ({ podSelector: {}, ingress: [{ from: [peer] }] });
const ingressPort = (port: unknown): unknown => ({ podSelector: {}, ingress: [{ ports: [port] }] });

describe('kubernetes policy objects', () => {
  it('leaves out pods that are done, and reads podIP when podIPs is absent', () => {
    const pod = (phase: string, status: object = {}): V1Pod =>
      ({
        metadata: { namespace: 'x', name: 'a', uid: 'u' },
        spec: { containers: [] },
        status: { phase, ...status },
      }) as V1Pod;
    expect(podFromApi(pod('Succeeded', { podIP: '10.0.0.1' }))).to.equal(undefined);
    expect(podFromApi(pod('Failed', { podIP: '10.0.0.1' }))).to.equal(undefined);
    expect(podFromApi(pod('Pending'))?.ips).to.deep.equal([]);
    expect(podFromApi(pod('Running', { podIP: 'FD00:0::1' }))?.ips).to.deep.equal(['fd00::1']);
    expect(podFromApi(pod('Running', { podIPs: [{ ip: '10.0.0.1' }, { ip: 'bogus' }] }))?.ips).to.deep.equal([
      '10.0.0.1',
    ]);
  });

  it('reads named ports of the containers and of sidecars (init containers that keep running), not of other init containers', () => {
    const port = (name: string, containerPort: number): object => ({ name, containerPort });
    const pod = {
      metadata: { namespace: 'x', name: 'a', uid: 'u' },
      spec: {
        containers: [{ name: 'app', ports: [port('http', 8080)] }],
        initContainers: [
          { name: 'proxy', restartPolicy: 'Always', ports: [port('admin', 9901), { containerPort: 15000 }] },
          { name: 'migrate', ports: [port('db', 5432)] },
        ],
      },
      status: { phase: 'Running' },
    } as V1Pod;
    expect(podFromApi(pod)?.namedPorts).to.deep.equal([
      { name: 'http', protocol: 'TCP', port: 8080 },
      { name: 'admin', protocol: 'TCP', port: 9901 },
    ]);
  });

  it("defaults policyTypes as the API does (Egress only with egress rules) and a port's protocol to TCP", () => {
    expect(accepted({ podSelector: {} })).to.deep.include({
      policyTypes: ['Ingress'],
      ingress: [],
      egress: [],
    });
    expect(accepted({ podSelector: {}, egress: [] })).to.deep.include({ policyTypes: ['Ingress'] });
    expect(accepted({ podSelector: {}, egress: [{}] })).to.deep.include({
      policyTypes: ['Ingress', 'Egress'],
      egress: [{}],
    });
    expect(accepted({ podSelector: {}, policyTypes: ['Egress'] })).to.deep.include({
      policyTypes: ['Egress'],
    });
    expect(accepted(ingressPort({ port: 80, endPort: 90 }))).to.deep.include({
      ingress: [{ ports: [{ protocol: 'TCP', port: 80, endPort: 90 }] }],
    });
    expect(accepted(ingressPort({ protocol: 'SCTP' }))).to.deep.include({
      ingress: [{ ports: [{ protocol: 'SCTP' }] }],
    });
    expect(
      accepted(ingressFrom({ ipBlock: { cidr: 'FD00:0:0:0::/48', except: ['fd00:0:0:1::/64'] } })),
    ).to.deep.include({
      ingress: [{ peers: [{ ipBlock: { cidr: 'fd00::/48', except: ['fd00:0:0:1::/64'] } }] }],
    });
  });

  const refused: Array<[string, unknown, RegExp]> = [
    [
      'an unknown selector operator',
      { podSelector: { matchExpressions: [{ key: 'a', operator: 'Like', values: ['b'] }] } },
      /spec\.podSelector\.matchExpressions\[0\]\.operator is "Like", not In, NotIn, Exists or DoesNotExist/,
    ],
    [
      'In without values',
      ingressFrom({ namespaceSelector: { matchExpressions: [{ key: 'a', operator: 'In', values: [] }] } }),
      /spec\.ingress\[0\]\.from\[0\]\.namespaceSelector\.matchExpressions\[0\]\.values is empty, and operator In needs at least one value/,
    ],
    [
      'Exists with values',
      { podSelector: { matchExpressions: [{ key: 'a', operator: 'Exists', values: ['b'] }] } },
      /values must be empty with operator Exists/,
    ],
    [
      'a malformed cidr',
      ingressFrom({ ipBlock: { cidr: '10.0.0/8' } }),
      /ipBlock\.cidr is "10\.0\.0\/8", not a CIDR/,
    ],
    [
      'an except outside its cidr',
      ingressFrom({ ipBlock: { cidr: '10.0.0.0/16', except: ['10.1.0.0/24'] } }),
      /ipBlock\.except\[0\] 10\.1\.0\.0\/24 is not inside cidr 10\.0\.0\.0\/16/,
    ],
    [
      'an except as wide as its cidr',
      ingressFrom({ ipBlock: { cidr: '10.0.0.0/16', except: ['10.0.0.0/16'] } }),
      /is not inside cidr/,
    ],
    [
      'an except of the other family',
      ingressFrom({ ipBlock: { cidr: '10.0.0.0/16', except: ['fd00::/64'] } }),
      /is not inside cidr/,
    ],
    [
      'an endPort without a port',
      ingressPort({ endPort: 90 }),
      /ports\[0\]\.endPort is set without a numeric port/,
    ],
    [
      'an endPort with a named port',
      ingressPort({ port: 'http', endPort: 90 }),
      /endPort is set without a numeric port/,
    ],
    [
      'an endPort below its port',
      ingressPort({ port: 90, endPort: 80 }),
      /endPort is 80, not a port number from 90 to 65535/,
    ],
    ['a port out of range', ingressPort({ port: 70000 }), /port is 70000, not a port number 1-65535/],
    [
      'a malformed port name',
      ingressPort({ port: '80' }),
      /port is "80", neither a port number nor a port name/,
    ],
    ['an unknown protocol', ingressPort({ protocol: 'ICMP' }), /protocol is "ICMP", not TCP, UDP or SCTP/],
    [
      'an ipBlock beside a selector',
      ingressFrom({ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }),
      /has an ipBlock beside a selector/,
    ],
    ['an empty peer', ingressFrom({}), /spec\.ingress\[0\]\.from\[0\] names no peer/],
    [
      'an unknown policy type',
      { podSelector: {}, policyTypes: ['Both'] },
      /spec\.policyTypes\[0\] is "Both"/,
    ],
  ];
  for (const [what, spec, message] of refused)
    it(`refuses a policy with ${what}, naming the policy and the field`, () => {
      const reason = refusal(spec);
      expect(reason).to.match(/^NetworkPolicy x\/p refused: /);
      expect(reason).to.match(message);
    });
});
