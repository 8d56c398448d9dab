import { expect } from 'chai';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniServer } from '../../../adapters/cni/cni-server';
import { exhausted, notFound, unavailable } from '../../../core/errors';
import { type ShimRun, buildShim, runShim } from '../../support/cni-harness';
import { NetnsSet } from '../../support/netns';
import type { Attachment, WorkloadService } from '../../../core/workload-service';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';

// CNI spec conformance end to end: the real compiled forwarder, the real HTTP server on a unix socket,
// and an in-memory WorkloadService standing in for the orchestrator.

interface Call extends ShimRun {
  json: Record<string, unknown> | undefined;
}

describe('CNI adapter through the forwarder and the daemon socket', function () {
  this.timeout(20000);

  const netns = new NetnsSet('wnc-');
  let dir: string;
  let shim: string;
  let socketPath: string;
  let nsA: string;
  let nsB: string;
  let backend: RecordingBackend;
  let d: InProcessDaemon;
  let server: CniServer;

  before(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'wnc-cni-'));
    shim = await buildShim(dir);
    socketPath = path.join(dir, 'cni.sock');
    nsA = netns.add('a').path;
    nsB = netns.add('b').path;
  });

  after(async () => {
    netns.cleanup();
    await fs.rm(dir, { recursive: true, force: true });
  });

  // The real service (an in-process daemon with the recording backend) behind the CNI endpoint.
  beforeEach(async () => {
    backend = new RecordingBackend();
    d = await InProcessDaemon.start(backend, { podCidrs: ['10.88.0.0/16', 'fd00:88::/64'] });
    server = new CniServer(d.daemon.service, { socketPath });
    await server.listen();
  });

  afterEach(async () => {
    await server.close();
    await d.dispose();
  });

  /**
   * The service's failures that no real daemon can be made to give on cue (NOT_FOUND or UNAVAILABLE on
   * DEL, UNAVAILABLE on STATUS): the endpoint is served by a service that answers every call with `err`,
   * the one stand-in service left, to pin how the adapter maps each code.
   */
  async function serveFailing(err: Error): Promise<void> {
    await server.close();
    const fail = async (): Promise<never> => {
      throw err;
    };
    const failing: WorkloadService = {
      attach: fail,
      detach: fail,
      status: fail,
      list: fail,
      listPage: fail,
      get: fail,
      check: fail,
      gc: fail,
      sweep: fail,
    };
    server = new CniServer(failing, { socketPath });
    await server.listen();
  }

  async function attachments(): Promise<Attachment[]> {
    return [...(await d.daemon.service.list())];
  }

  async function attachment(key: string): Promise<Attachment | undefined> {
    return (await attachments()).find((a) => a.key === key);
  }

  /** What the dataplane was asked to do, in order: "attach ctr1/eth0", "detach ctr1/eth0". */
  const dataplaneCalls = (): string[] => backend.calls.map((c) => `${c.op} ${c.key}`);

  function config(cniVersion: string, extra: Record<string, unknown> = {}): string {
    return JSON.stringify({ cniVersion, name: 'wnc-net', type: 'workloadnet', socket: socketPath, ...extra });
  }

  function env(
    command: string,
    containerId: string,
    ns: string,
    more: Record<string, string> = {},
  ): Record<string, string> {
    return {
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_NETNS: ns,
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS:
        'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=' +
        containerId +
        ';K8S_POD_UID=uid-1;IgnoreUnknown=1',
      ...more,
    };
  }

  async function cni(e: Record<string, string>, stdin: string): Promise<Call> {
    // The env socket covers configs without a "socket" field (VERSION, undecodable stdin).
    const run = await runShim(shim, { WORKLOADNET_CNI_SOCKET: socketPath, ...e }, stdin);
    let json: Record<string, unknown> | undefined;
    if (run.stdout !== '') json = JSON.parse(run.stdout) as Record<string, unknown>;
    return { ...run, json };
  }

  function expectError(call: Call, code: number): void {
    expect(call.exitCode, call.stdout).to.equal(1);
    expect(call.json, 'error JSON').to.include({ code });
    expect(call.json?.msg).to.be.a('string').and.not.equal('');
  }

  for (const version of ['0.4.0', '1.0.0', '1.1.0']) {
    describe(`cniVersion ${version}`, () => {
      it("ADD answers a result in this version's format and records the pod as metadata", async () => {
        const call = await cni(env('ADD', 'ctr1', nsA), config(version));
        expect(call.exitCode, call.stdout).to.equal(0);
        const result = call.json as {
          cniVersion: string;
          interfaces: Record<string, unknown>[];
          ips: Record<string, unknown>[];
          routes: Record<string, unknown>[];
        };
        expect(result.cniVersion).to.equal(version);
        const att = await attachment('ctr1/eth0');
        expect(att, 'attachment in the service').to.not.equal(undefined);
        expect(att?.pod).to.deep.equal({ uid: 'uid-1', namespace: 'default', name: 'web-0' });

        const container = result.interfaces.find((i) => i.sandbox === nsA);
        expect(container).to.include({ name: 'eth0', mac: att?.dataplane?.mac });
        expect(
          result.interfaces.some((i) => i.name === att?.dataplane?.hostIfName && i.sandbox === undefined),
        ).to.equal(true);
        if (version === '1.1.0') expect(container?.mtu).to.equal(att?.mtu);
        else expect(container).to.not.have.property('mtu');

        const v4 = att?.ips.find((ip) => ip.family === 4);
        const v6 = att?.ips.find((ip) => ip.family === 6);
        const ip4 = result.ips.find((ip) => ip.address === `${v4?.address}/32`);
        const ip6 = result.ips.find((ip) => ip.address === `${v6?.address}/128`);
        expect(ip4, JSON.stringify(result.ips)).to.include({
          gateway: '169.254.1.1',
          interface: result.interfaces.indexOf(container!),
        });
        expect(ip6).to.include({ gateway: 'fe80::1' });
        if (version === '0.4.0') {
          expect(ip4?.version).to.equal('4');
          expect(ip6?.version).to.equal('6');
        } else {
          expect(ip4).to.not.have.property('version');
          expect(ip6).to.not.have.property('version');
        }
        expect(result.routes).to.deep.include({ dst: '0.0.0.0/0', gw: '169.254.1.1' });
      });

      it('returns the same result when ADD is repeated for the same container and interface', async () => {
        const first = await cni(env('ADD', 'ctr1', nsA), config(version));
        const second = await cni(env('ADD', 'ctr1', nsA), config(version));
        expect(first.exitCode).to.equal(0);
        expect(second.stdout).to.equal(first.stdout);
        expect(dataplaneCalls().filter((m) => m.startsWith('attach'))).to.deep.equal(['attach ctr1/eth0']);
      });

      it('succeeds when DEL is repeated three times and releases the attachment', async () => {
        expect((await cni(env('ADD', 'ctr1', nsA), config(version))).exitCode).to.equal(0);
        for (let i = 0; i < 3; i++) {
          const del = await cni(env('DEL', 'ctr1', nsA), config(version));
          expect(del.exitCode, del.stdout).to.equal(0);
          expect(del.stdout).to.equal('');
        }
        expect(await attachments()).to.have.length(0);
      });

      it('succeeds on DEL with an empty CNI_NETNS and no prevResult', async () => {
        expect((await cni(env('ADD', 'ctr1', nsA), config(version))).exitCode).to.equal(0);
        const del = await cni(env('DEL', 'ctr1', ''), config(version));
        expect(del.exitCode, del.stdout).to.equal(0);
        expect(await attachment('ctr1/eth0')).to.equal(undefined);
      });

      it('passes CHECK when nothing drifted and fails it listing the drift', async () => {
        const add = await cni(env('ADD', 'ctr1', nsA), config(version));
        const prevResult = add.json;
        const ok = await cni(env('CHECK', 'ctr1', nsA), config(version, { prevResult }));
        expect(ok.exitCode, ok.stdout).to.equal(0);
        expect(ok.stdout).to.equal('');

        backend.drift.set('ctr1/eth0', [
          { kind: 'address-missing', message: '10.88.0.2/32 is gone from eth0' },
        ]);
        const bad = await cni(env('CHECK', 'ctr1', nsA), config(version, { prevResult }));
        expectError(bad, 100);
        expect(bad.json?.msg).to.contain('address-missing').and.contain('10.88.0.2/32 is gone');
      });

      it('fails CHECK with code 3 for a container that was never added', async () => {
        const prevResult = { cniVersion: version, interfaces: [], ips: [] };
        const call = await cni(env('CHECK', 'ghost', nsA), config(version, { prevResult }));
        expectError(call, 3);
      });

      if (version === '1.1.0') {
        it('GC removes exactly the attachments missing from cni.dev/valid-attachments', async () => {
          for (const id of ['keep1', 'drop1', 'keep2', 'drop2']) {
            expect((await cni(env('ADD', id, nsA), config(version))).exitCode).to.equal(0);
          }
          const valid = [
            { containerID: 'keep1', ifname: 'eth0' },
            { containerID: 'keep2', ifname: 'eth0' },
          ];
          const gc = await cni(
            { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
            config(version, { 'cni.dev/valid-attachments': valid }),
          );
          expect(gc.exitCode, gc.stdout).to.equal(0);
          expect((await attachments()).map((a) => a.key).sort()).to.deep.equal(['keep1/eth0', 'keep2/eth0']);
        });

        it('refuses GC without cni.dev/valid-attachments rather than detaching everything', async () => {
          expect((await cni(env('ADD', 'ctr1', nsA), config(version))).exitCode).to.equal(0);
          const gc = await cni({ CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, config(version));
          expectError(gc, 7);
          expect(await attachments()).to.have.length(1);
        });

        it('STATUS exits 0 when the service is ready and answers 50 with the reasons when not', async () => {
          const ok = await cni({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, config(version));
          expect(ok.exitCode, ok.stdout).to.equal(0);
          expect(ok.stdout).to.equal('');

          backend.healthy = false;
          const notReady = await cni({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, config(version));
          expectError(notReady, 50);
          expect(notReady.json?.msg).to.contain('recording backend set unhealthy');
        });
      } else {
        it('refuses GC and STATUS with code 1 because this version predates them', async () => {
          expect((await cni(env('ADD', 'ctr1', nsA), config(version))).exitCode).to.equal(0);
          const gc = await cni(
            { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
            config(version, { 'cni.dev/valid-attachments': [] }),
          );
          expectError(gc, 1);
          const status = await cni({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, config(version));
          expectError(status, 1);
          expect(await attachments(), 'GC removed nothing').to.have.length(1);
        });
      }
    });
  }

  it('answers VERSION with every supported version', async () => {
    const call = await cni({ CNI_COMMAND: 'VERSION' }, JSON.stringify({ cniVersion: '1.0.0' }));
    expect(call.exitCode).to.equal(0);
    expect(call.json?.supportedVersions).to.include.members(['0.3.1', '0.4.0', '1.0.0', '1.1.0']);
    expect(call.json?.cniVersion).to.be.a('string');
  });

  describe('refusals leave the service untouched', () => {
    afterEach(async () => {
      expect(dataplaneCalls(), 'dataplane calls').to.deep.equal([]);
      expect(await attachments(), 'attachments').to.deep.equal([]);
    });

    it('answers code 4 to an unknown verb', async () => {
      const call = await cni(env('FROB', 'ctr1', nsA), config('1.0.0'));
      expectError(call, 4);
      expect(call.json?.msg).to.contain('FROB');
    });

    it('answers code 4 naming the missing environment variables', async () => {
      const call = await cni(
        { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'ctr1', CNI_PATH: '/opt/cni/bin' },
        config('1.0.0'),
      );
      expectError(call, 4);
      expect(call.json?.msg).to.contain('CNI_NETNS').and.contain('CNI_IFNAME');
    });

    it('answers code 4 when CNI_COMMAND itself is missing', async () => {
      const call = await cni({ CNI_CONTAINERID: 'ctr1' }, config('1.0.0'));
      expectError(call, 4);
      expect(call.json?.msg).to.contain('CNI_COMMAND');
    });

    it('answers code 6 to a config that is not JSON', async () => {
      const call = await cni(env('ADD', 'ctr1', nsA), '{"cniVersion": "1.0.0", "name": ');
      expectError(call, 6);
    });

    it('answers code 6 to a request larger than the daemon accepts', async () => {
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.0.0', { padding: 'x'.repeat(1100 * 1024) }));
      expectError(call, 6);
      expect(call.json?.msg).to.contain('exceeds');
    });

    it('answers code 1 to an unsupported or missing cniVersion', async () => {
      const old = await cni(env('ADD', 'ctr1', nsA), config('0.2.0'));
      expectError(old, 1);
      expect(old.json?.details).to.contain('0.2.0').and.contain('1.1.0');
      const none = await cni(
        env('ADD', 'ctr1', nsA),
        JSON.stringify({ name: 'wnc-net', type: 'workloadnet' }),
      );
      expectError(none, 1);
    });

    it('answers code 4 when CNI_NETNS is not a network namespace', async () => {
      const call = await cni(env('ADD', 'ctr1', dir), config('1.0.0'));
      expectError(call, 4);
      expect(call.json?.msg).to.contain(dir);
    });

    it("answers code 4 when CNI_NETNS is the daemon's own namespace", async () => {
      const call = await cni(env('ADD', 'ctr1', `/proc/${process.pid}/ns/net`), config('1.0.0'));
      expectError(call, 4);
      expect(call.json?.msg).to.contain("daemon's own");
    });

    it('answers code 4 to an unknown CNI_ARGS key without IgnoreUnknown', async () => {
      const call = await cni(
        env('ADD', 'ctr1', nsA, { CNI_ARGS: 'K8S_POD_NAME=web-0;COLOUR=blue' }),
        config('1.0.0'),
      );
      expectError(call, 4);
      expect(call.json?.msg).to.contain('COLOUR');
    });

    it('answers code 4 to an interface name Linux would refuse', async () => {
      const call = await cni(env('ADD', 'ctr1', nsA, { CNI_IFNAME: 'a-very-long-ifname0' }), config('1.0.0'));
      expectError(call, 4);
    });

    it('answers code 7 to an MTU out of range', async () => {
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.0.0', { mtu: 20 }));
      expectError(call, 7);
      expect(call.json?.msg).to.contain('mtu');
    });

    it('answers code 1 to CHECK under a 0.3.1 config, which predates CHECK', async () => {
      const call = await cni(
        env('CHECK', 'ctr1', nsA),
        config('0.3.1', { prevResult: { cniVersion: '0.3.1', ips: [] } }),
      );
      expectError(call, 1);
    });
  });

  describe('service outcomes', () => {
    it('maps an exhausted pool to code 11 so the runtime retries', async () => {
      backend.failAttach = exhausted('pool 10.88.0.0/16 has no free address');
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.0.0'));
      expectError(call, 11);
      expect(call.json?.msg).to.contain('no free address');
      expect(call.json?.details).to.contain('RESOURCE_EXHAUSTED');
    });

    it('treats NOT_FOUND from the service as a successful DEL, and UNAVAILABLE as try-again', async () => {
      await serveFailing(notFound('no attachment ctr9/eth0'));
      const gone = await cni(env('DEL', 'ctr9', nsA), config('1.0.0'));
      expect(gone.exitCode, gone.stdout).to.equal(0);
      await serveFailing(unavailable('store is reopening'));
      const busy = await cni(env('DEL', 'ctr9', nsA), config('1.0.0'));
      expectError(busy, 11);
    });

    it('answers STATUS with 50 when the service itself is unavailable', async () => {
      await serveFailing(unavailable('DPU agent not connected'));
      const call = await cni({ CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, config('1.1.0'));
      expectError(call, 50);
    });

    it('answers code 7 when the same container and interface are added from another netns', async () => {
      expect((await cni(env('ADD', 'ctr1', nsA), config('1.0.0'))).exitCode).to.equal(0);
      const call = await cni(env('ADD', 'ctr1', nsB), config('1.0.0'));
      expectError(call, 7);
      expect(call.json?.msg).to.contain('DEL');
      expect((await attachment('ctr1/eth0'))?.netnsPath).to.equal(nsA);
    });

    it('passes the config MTU to the service and reports it in a 1.1.0 result', async () => {
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.1.0', { mtu: 1400 }));
      expect(call.exitCode, call.stdout).to.equal(0);
      expect(backend.programmed.get('ctr1/eth0')?.mtu).to.equal(1400);
      const ifs = call.json?.interfaces as Record<string, unknown>[];
      expect(ifs.find((i) => i.sandbox === nsA)?.mtu).to.equal(1400);
    });

    it('passes the DPU named by the network config, and the one in CNI_ARGS over it', async () => {
      const byConfig = await cni(env('ADD', 'ctr1', nsA), config('1.1.0', { dpu: 'dpu-b' }));
      expect(byConfig.exitCode, byConfig.stdout).to.equal(0);
      expect(backend.programmed.get('ctr1/eth0')?.dpu).to.equal('dpu-b');
      const byArgs = await cni(
        env('ADD', 'ctr2', nsA, {
          CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=web-1;WORKLOADNET_DPU=dpu-c',
        }),
        config('1.1.0', { dpu: 'dpu-b' }),
      );
      expect(byArgs.exitCode, byArgs.stdout).to.equal(0);
      expect(backend.programmed.get('ctr2/eth0')?.dpu).to.equal('dpu-c');
      const neither = await cni(env('ADD', 'ctr3', nsA), config('1.1.0'));
      expect(neither.exitCode, neither.stdout).to.equal(0);
      expect(backend.programmed.get('ctr3/eth0')?.dpu).to.equal(undefined);
      const bad = await cni(env('ADD', 'ctr4', nsA), config('1.1.0', { dpu: 7 }));
      expectError(bad, 7);
      expect(String(bad.json?.msg)).to.match(/dpu must be a string/);
      expect(dataplaneCalls()).to.deep.equal(['attach ctr1/eth0', 'attach ctr2/eth0', 'attach ctr3/eth0']);
    });

    it("passes the VF settings of the network config under SR-IOV CNI's keys, and refuses bad ones", async () => {
      const vf = {
        max_tx_rate: 100,
        min_tx_rate: 10,
        spoofchk: 'on',
        trust: 'off',
        link_state: 'enable',
        pf: 1,
      };
      const ok = await cni(env('ADD', 'ctr1', nsA), config('1.1.0', vf));
      expect(ok.exitCode, ok.stdout).to.equal(0);
      expect(backend.programmed.get('ctr1/eth0')?.dpuPort).to.deep.equal({
        maxTxRateMbps: 100,
        minTxRateMbps: 10,
        spoofCheck: true,
        trust: false,
        linkState: 'enable',
        pf: 1,
      });
      for (const [bad, msg] of [
        [{ spoofchk: true }, /spoofchk must be "on" or "off"/],
        [{ max_tx_rate: -1 }, /max_tx_rate must be a whole number/],
        [{ link_state: 'up' }, /link_state must be/],
      ] as const) {
        const call = await cni(env('ADD', 'ctr9', nsA), config('1.1.0', bad));
        expectError(call, 7);
        expect(String(call.json?.msg)).to.match(msg);
      }
      expect(dataplaneCalls()).to.deep.equal(['attach ctr1/eth0']);
    });

    it("echoes containerd's capitalised runtimeConfig.dns in the result", async () => {
      const runtimeConfig = {
        dns: { Servers: ['10.96.0.10'], Searches: ['default.svc.cluster.local'], Options: ['ndots:5'] },
        portMappings: [{ HostPort: 18080, ContainerPort: 8080, Protocol: 'tcp', HostIP: '127.0.0.1' }],
      };
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.0.0', { runtimeConfig }));
      expect(call.exitCode, call.stdout).to.equal(0);
      expect(call.json?.dns).to.deep.equal({
        nameservers: ['10.96.0.10'],
        search: ['default.svc.cluster.local'],
        options: ['ndots:5'],
      });
      expect((await attachment('ctr1/eth0'))?.dns?.nameservers).to.deep.equal(['10.96.0.10']);
    });

    it("keeps an earlier plugin's prevResult first and shifts our interface indexes after it", async () => {
      const prevResult = {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'net1', sandbox: nsA }],
        ips: [{ address: '192.168.50.7/24', interface: 0 }],
        routes: [{ dst: '192.168.0.0/16' }],
      };
      const call = await cni(env('ADD', 'ctr1', nsA), config('1.0.0', { prevResult }));
      expect(call.exitCode, call.stdout).to.equal(0);
      const result = call.json as {
        interfaces: { name: string }[];
        ips: { address: string; interface: number }[];
        routes: unknown[];
      };
      expect(result.interfaces[0]?.name).to.equal('net1');
      expect(result.ips[0]).to.deep.equal({ address: '192.168.50.7/24', interface: 0 });
      const ours = result.ips.find((ip) => ip.address.startsWith('10.88.'));
      expect(result.interfaces[ours!.interface]?.name).to.equal('eth0');
      expect(result.routes[0]).to.deep.equal({ dst: '192.168.0.0/16' });
    });

    it('fails CHECK when prevResult does not hold the address the daemon assigned', async () => {
      expect((await cni(env('ADD', 'ctr1', nsA), config('1.0.0'))).exitCode).to.equal(0);
      const prevResult = {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'eth0', sandbox: nsA }],
        ips: [{ address: '10.99.0.9/32', interface: 0 }],
      };
      const call = await cni(env('CHECK', 'ctr1', nsA), config('1.0.0', { prevResult }));
      expectError(call, 100);
      expect(call.json?.msg).to.contain('prevResult lacks address');
    });

    it('carries CNI_ARGS values with quotes, backslashes and UTF-8 through the forwarder intact', async () => {
      const name = 'we"ird\\pod-ñ-✓';
      const call = await cni(
        env('ADD', 'ctr1', nsA, { CNI_ARGS: `K8S_POD_NAME=${name};IgnoreUnknown=1` }),
        config('1.0.0'),
      );
      expect(call.exitCode, call.stdout).to.equal(0);
      expect((await attachment('ctr1/eth0'))?.pod?.name).to.equal(name);
    });
  });
});
