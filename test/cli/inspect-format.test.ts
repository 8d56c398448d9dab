import { expect } from 'chai';
import { addressText, formatInspect } from '../../cli/inspect-format';
import type { Attachment } from '../../proto/gen/workloadnet/v1/workload';

// The text `workloadnet inspect` prints for each backend's placement, from API-shaped attachments.

function attachment(
  backend: string,
  hostIf: string | undefined,
  details: Record<string, string>,
): Attachment {
  return {
    workloadId: 'w1',
    ifName: 'eth0',
    netnsPath: '/var/run/netns/cni-1',
    containerId: '',
    pod: { uid: 'u1', namespace: 'ns', name: 'web' },
    state: 'ready',
    createdAt: new Date(0).toISOString(),
    result: {
      ip: [Buffer.from([10, 88, 0, 2])],
      interfaces: [
        { name: 'eth0', mac: '02:00:00:00:00:01', mtu: 1500, sandbox: '/var/run/netns/cni-1' },
        ...(hostIf ? [{ name: hostIf, mac: '', mtu: 1500, sandbox: '' }] : []),
      ],
      ips: [{ cidr: '10.88.0.2/32', gateway: '169.254.1.1', interface: 0, family: 4 }],
      routes: [{ destination: '0.0.0.0/0', gateway: '169.254.1.1' }],
      dns: undefined,
      backend,
      backendDetails: details,
      network: 'default',
    },
    network: 'default',
  };
}

describe('workloadnet inspect output', () => {
  it('prints addresses as text, the netns, the pod and the Linux host interface', () => {
    const out = formatInspect([
      attachment('linux', 'wn0a1b2c3d', { hostIfName: 'wn0a1b2c3d', linkGroup: '7' }),
    ]);
    expect(out).to.match(/^addresses:\s+10\.88\.0\.2\/32 gateway 169\.254\.1\.1$/m);
    expect(out).to.match(/^netns:\s+\/var\/run\/netns\/cni-1$/m);
    expect(out).to.match(/^pod:\s+ns\/web \(uid u1\)$/m);
    expect(out).to.match(/^host side:\s+wn0a1b2c3d$/m);
    expect(out).to.match(/^routes:\s+0\.0\.0\.0\/0 via 169\.254\.1\.1$/m);
  });

  it('prints the DPU agent and port, and says when the agent programs no host interface', () => {
    const details = { dpuAgentId: 'dpu-7', dpuPort: 'w1/eth0', dpuGeneration: '3', dpuEndpoint: '' };
    const out = formatInspect([attachment('dpu', undefined, details)]);
    expect(out).to.match(/^dpu:\s+agent dpu-7, port w1\/eth0, generation 3$/m);
    expect(out).to.match(/^host side:\s+none/m);
    const withVf = formatInspect([attachment('dpu', 'vf3', { ...details, dpuEndpoint: 'vf3' })]);
    expect(withVf).to.match(/^host side:\s+vf3$/m);
  });

  it('turns the raw addresses of the original contract into text, IPv6 included', () => {
    expect(addressText(Uint8Array.from([10, 88, 0, 2]))).to.equal('10.88.0.2');
    const v6 = Uint8Array.from([0xfd, 0, 0, 0x88, ...new Array<number>(11).fill(0), 2]);
    expect(addressText(v6)).to.equal('fd00:88::2');
  });
});
