import { expect } from 'chai';
import { asWorkloadNetError, knownWorkloadNetError, WorkloadNetError } from '../../core/errors';
import { CidrError, parseCidr } from '../../lib/cidr';
import { NetnsError, NetnsStateError } from '../../lib/netns/netns-error';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import { VxlanDeviceError } from '../../lib/overlay/vxlan-device';
import { NetlinkSocketError } from '../../lib/rtnetlink';
import { netlinkFdIn } from '../../lib/rtnetlink/socket';

// lib/ throws its own errors, without gRPC codes; core/errors.ts is the one place that gives them
// theirs. These are the codes callers got when lib/ threw WorkloadNetErrors itself.

describe("lib/ errors get the daemon's codes in one place", () => {
  const cases: Array<[string, Error, string]> = [
    ['bad address text', new CidrError('"10.1" is not a valid IPv4 address'), 'INVALID_ARGUMENT'],
    [
      'a path that is no namespace',
      new NetnsError('not-a-netns', '/tmp/x', 'not a netns'),
      'INVALID_ARGUMENT',
    ],
    ['a namespace that is gone', new NetnsError('missing', '/proc/1/ns/net', 'gone'), 'INVALID_ARGUMENT'],
    [
      'no namespace of our own',
      new NetnsStateError('no-own-namespace', 'cannot open'),
      'FAILED_PRECONDITION',
    ],
    ['a closed handle', new NetnsStateError('closed', 'handle closed'), 'INTERNAL'],
    ['setns refused', new NetlinkSocketError('permission', 'not allowed to enter'), 'FAILED_PRECONDITION'],
    ['socket(2) failed', new NetlinkSocketError('failed', 'cannot open a netlink socket'), 'INTERNAL'],
    [
      "a VXLAN device that is another's",
      new VxlanDeviceError('wn-vxlan exists but is not ours'),
      'FAILED_PRECONDITION',
    ],
  ];
  for (const [what, err, code] of cases) {
    it(`${what}: ${code}, the message kept, not retryable`, () => {
      const e = knownWorkloadNetError(err);
      expect(e).to.be.instanceOf(WorkloadNetError);
      expect(e?.code).to.equal(code);
      expect(e?.message).to.equal(err.message);
      expect(e?.retryable).to.equal(false);
      expect(asWorkloadNetError(err).code).to.equal(code);
    });
  }

  it('an unexpected error is not known, and INTERNAL as before', () => {
    expect(knownWorkloadNetError(new TypeError('boom'))).to.equal(undefined);
    expect(asWorkloadNetError(new TypeError('boom')).code).to.equal('INTERNAL');
  });

  it('a CIDR with host bits set is INVALID_ARGUMENT with its hint', () => {
    let caught: unknown;
    try {
      parseCidr('10.88.0.1/16');
    } catch (err) {
      caught = err;
    }
    expect(caught).to.be.instanceOf(CidrError);
    expect(asWorkloadNetError(caught).message).to.equal(
      '10.88.0.1/16 has host bits set; did you mean 10.88.0.0/16?',
    );
  });

  it('a netlink socket asked of a closed handle says the handle is closed (INTERNAL), not that socket(2) failed', () => {
    const ns = NetnsHandle.own();
    ns.close();
    let caught: unknown;
    try {
      netlinkFdIn(ns);
    } catch (err) {
      caught = err;
    }
    expect(caught).to.be.instanceOf(NetnsStateError);
    const e = asWorkloadNetError(caught);
    expect(e.code).to.equal('INTERNAL');
    expect(e.message).to.equal('network namespace handle for /proc/thread-self/ns/net is closed');
  });
});
