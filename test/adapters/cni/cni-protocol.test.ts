import { expect } from 'chai';
import { parseCniArgs } from '../../../adapters/cni/cni-args';
import { CniError, cniErrorFromService } from '../../../adapters/cni/cni-error';
import { formatCniResult, parsePrevResult } from '../../../adapters/cni/cni-result';
import {
  alreadyExists,
  internal,
  invalidArgument,
  notFound,
  unavailable,
  WorkloadNetError,
} from '../../../core/errors';

// The protocol pieces on their own, where the end-to-end tests would need many runs to cover them.

describe('CNI protocol pieces', () => {
  describe('parseCniArgs', () => {
    it('reads the pod identity that Kubernetes runtimes send, in any order', () => {
      const args = parseCniArgs(
        'IgnoreUnknown=1;K8S_POD_UID=u-1;K8S_POD_NAME=web;K8S_POD_NAMESPACE=prod;K8S_POD_INFRA_CONTAINER_ID=abc',
      );
      expect(args).to.include({
        podUid: 'u-1',
        podName: 'web',
        podNamespace: 'prod',
        podInfraContainerId: 'abc',
      });
    });

    it('reads WORKLOADNET_DPU, the DPU agent a pod asks for, without IgnoreUnknown', () => {
      expect(parseCniArgs('WORKLOADNET_DPU=dpu-b;K8S_POD_NAME=web').dpu).to.equal('dpu-b');
      expect(parseCniArgs('K8S_POD_NAME=web').dpu).to.equal(undefined);
    });

    it('keeps everything after the first "=" as the value', () => {
      expect(parseCniArgs('IgnoreUnknown=true;TOKEN=a=b==').all.TOKEN).to.equal('a=b==');
    });

    it('refuses unknown keys unless IgnoreUnknown is set', () => {
      expect(() => parseCniArgs('K8S_POD_NAME=web;EXTRA=1')).to.throw(CniError, /EXTRA/);
      expect(parseCniArgs('K8S_POD_NAME=web;EXTRA=1;IgnoreUnknown=1').podName).to.equal('web');
      expect(() => parseCniArgs('EXTRA=1;IgnoreUnknown=0')).to.throw(CniError);
    });

    it('refuses a pair without "=" with code 4', () => {
      try {
        parseCniArgs('K8S_POD_NAME');
        expect.fail('should throw');
      } catch (err) {
        expect((err as CniError).code).to.equal(4);
      }
    });
  });

  describe('cniErrorFromService', () => {
    const cases: Array<[WorkloadNetError, 'ADD' | 'STATUS' | 'CHECK', number]> = [
      [invalidArgument('bad mtu'), 'ADD', 7],
      [alreadyExists('taken'), 'ADD', 7],
      [notFound('gone'), 'CHECK', 3],
      [unavailable('agent lost'), 'ADD', 11],
      [unavailable('agent lost'), 'STATUS', 50],
      [new WorkloadNetError('DEADLINE_EXCEEDED', 'slow ack', true), 'ADD', 11],
      [internal('boom'), 'ADD', 999],
    ];
    for (const [err, verb, code] of cases) {
      it(`maps ${err.code} on ${verb} to CNI code ${code} and names the service code in details`, () => {
        const cni = cniErrorFromService(err, verb);
        expect(cni.code).to.equal(code);
        expect(cni.details).to.contain(err.code);
      });
    }

    it('maps an unexpected Error to 999 keeping its message', () => {
      expect(cniErrorFromService(new Error('disk on fire'), 'ADD')).to.include({
        code: 999,
        message: 'disk on fire',
      });
    });
  });

  describe('result formats', () => {
    const result = parsePrevResult({
      cniVersion: '1.1.0',
      interfaces: [
        { name: 'eth0', mac: '02:00:00:00:00:01', mtu: 1400, sandbox: '/run/netns/x', pciID: '0000:3b:00.2' },
      ],
      ips: [{ address: 'fd00::5/128', gateway: 'fe80::1', interface: 0 }],
      routes: [{ dst: '::/0', gw: 'fe80::1', priority: 10 }],
    });

    it('writes "version" per IP and no 1.1 fields for 0.4.0', () => {
      const out = formatCniResult(result, '0.4.0') as {
        interfaces: object[];
        ips: object[];
        routes: object[];
      };
      expect(out.ips[0]).to.deep.equal({
        version: '6',
        address: 'fd00::5/128',
        gateway: 'fe80::1',
        interface: 0,
      });
      expect(out.interfaces[0]).to.deep.equal({
        name: 'eth0',
        mac: '02:00:00:00:00:01',
        sandbox: '/run/netns/x',
      });
      expect(out.routes[0]).to.deep.equal({ dst: '::/0', gw: 'fe80::1' });
    });

    it('drops "version" for 1.0.0 and adds mtu, pciID and route priority for 1.1.0', () => {
      const v10 = formatCniResult(result, '1.0.0') as { ips: object[]; interfaces: object[] };
      expect(v10.ips[0]).to.not.have.property('version');
      expect(v10.interfaces[0]).to.not.have.property('mtu');
      const v11 = formatCniResult(result, '1.1.0') as { interfaces: object[]; routes: object[] };
      expect(v11.interfaces[0]).to.include({ mtu: 1400, pciID: '0000:3b:00.2' });
      expect(v11.routes[0]).to.include({ priority: 10 });
    });

    it('refuses a prevResult whose IP points at a missing interface', () => {
      expect(() =>
        parsePrevResult({ interfaces: [], ips: [{ address: '10.0.0.1/24', interface: 2 }] }),
      ).to.throw(CniError, /interface 2/);
    });
  });
});
