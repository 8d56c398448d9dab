import { expect } from 'chai';
import { InvalidArgumentError } from 'commander';
import { formatPolicy, parsePodFilter } from '../../cli/policy-command';
import type { PodPolicy, PolicyStatus } from '../../proto/gen/workloadnet/v1/workload';
import { expectHelpSnapshot } from '../support/cli-run';

// `workloadnet policy`: its help, its argument, and how it prints a pod's rules. The command against a
// daemon enforcing real policies is tested in test/integration/network-policy.test.ts.

const STATUS: PolicyStatus = {
  ready: false,
  reasons: ['backend linux: NetworkPolicy not applied: nft: Operation not permitted'],
  namespaces: 3,
  pods: 9,
  policies: 2,
  podsIsolated: 1,
  rules: 2,
  sets: 1,
  unenforced: ['w9/eth0'],
  enforcers: [{ backend: 'linux', where: 'host', failure: 'nft: Operation not permitted', lastApply: '' }],
  deniedIngress: 4,
  deniedEgress: 0,
};

const POD: PodPolicy = {
  pod: 'x/a',
  attachment: 'x_a/eth0',
  backend: 'linux',
  where: 'host',
  hostInterface: 'wn0123456789a',
  ips: ['10.1.0.5'],
  policies: ['x/allow-b', 'x/deny-all'],
  ingressIsolated: true,
  egressIsolated: false,
  ingress: [
    { sets: ['p0123'], anyPeer: false, ports: ['TCP/80', 'UDP/80-81'], anyPort: false },
    { sets: [], anyPeer: true, ports: [], anyPort: true },
  ],
  egress: [],
  sets: [{ name: 'p0123', prefixes: ['10.1.0.6/32'] }],
  appliedAt: '2026-12-07T20:00:00.000Z',
  deniedIngress: 4,
  deniedEgress: 0,
};

describe('workloadnet policy', () => {
  it('prints the same --help as its snapshot, with examples', () => expectHelpSnapshot(['policy']));

  it('takes a namespace, or a namespace and a pod, and refuses anything else in words', () => {
    expect(parsePodFilter(undefined)).to.deep.equal({ namespace: '', pod: '' });
    expect(parsePodFilter('prod')).to.deep.equal({ namespace: 'prod', pod: '' });
    expect(parsePodFilter('prod/web-0')).to.deep.equal({ namespace: 'prod', pod: 'web-0' });
    for (const bad of ['prod/', '/web-0', 'a/b/c'])
      expect(() => parsePodFilter(bad), bad).to.throw(
        InvalidArgumentError,
        'is not NAMESPACE or NAMESPACE/POD',
      );
  });

  it("prints each direction's isolation and rules, the sets with their members, and what fails", () => {
    const text = formatPolicy(STATUS, [POD]);
    expect(text).to.include('policy:      not ready, 2 policies, 1 pod(s) here isolated, 2 rules, 1 sets');
    expect(text).to.include('FAILING: nft: Operation not permitted');
    expect(text).to.include('unenforced: w9/eth0');
    expect(text).to.include('x/a (x_a/eth0, 10.1.0.5) on host via wn0123456789a');
    expect(text).to.include('policies: x/allow-b, x/deny-all; in force since 2026-12-07T20:00:00.000Z');
    expect(text).to.include('ingress: isolated, 2 rule(s), 4 packet(s) denied');
    expect(text).to.include('allow p0123; TCP/80 UDP/80-81');
    expect(text).to.include('allow any address; any port');
    expect(text).to.include('egress: not isolated (everything passes)');
    expect(text).to.include('set p0123: 10.1.0.6/32');
  });

  it('says so when no pod here is isolated', () => {
    expect(formatPolicy(undefined, [])).to.equal('no pod of this node is isolated by a policy\n');
  });
});
