import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Port } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import { PortOperState } from '../../../proto/gen/workloadnet/dpu/v1/dpu';
import type { AttachResponse } from '../../../proto/gen/workloadnet/v1/workload';
import { attachRequest, detachRequest } from '../../support/attach-request';
import { DaemonProcess } from '../../support/daemon-process';
import { NetnsSet, addNodeUplink, ipJson, type IpLink } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { okAck } from '../../support/dpu-fixtures';
import { RawAgent } from '../../support/raw-agent';
import { waitUntil } from '../../support/sim-process';

// A workload with eth0 on a Linux network and net1 on a DPU network. The DPU agent is outside the
// host's trust, and here it is a rogue: after its port is plumbed as net1 it acks the port again naming
// the workload's eth0, and its VF goes away. Detach of net1 used to look the endpoint up by that name
// in the workload's namespace and move the workload's eth0 out, down, into the host. Now the agent's
// second word is refused (logged, counted in Status) and Detach moves out only the link it moved in,
// told by its index and the port's MAC; the workload's eth0 stays where it is, up and routing.

const DEFAULT_CIDR = '10.254.30.0/24';
const FAST_CIDR = '10.254.40.0/24';
const AGENT_ID = 'dpu-rogue-reack';

describeRoot(
  "DPU backend: an agent re-acking a plumbed port cannot take the workload's other interface (root)",
  function () {
    this.timeout(60_000);
    const namespaces = new NetnsSet(`wn-reack-${process.pid}-`);
    let dir: string;
    let node: string;
    let daemon: DaemonProcess;
    let agent: RawAgent;
    let answered = 0;
    let answering: NodeJS.Timeout | undefined;
    let peer: { name: string; path: string };
    let peerAddress = '';
    let n = 0;

    const ip = (...args: string[]): void => void execFileSync('ip', ['-n', node, ...args]);
    const links = (ns: string): IpLink[] => ipJson<IpLink[]>(ns, ['link', 'show']);
    const names = (ns: string): string[] => links(ns).map((l) => l.ifname);
    const v4 = (res: AttachResponse): string =>
      (res.ips.find((i) => i.family === 4)?.cidr ?? '').split('/')[0] ?? '';
    const attach = (workloadId: string, netnsPath: string, ifName: string, network = '') =>
      daemon.client.call(daemon.client.raw.attach, attachRequest(workloadId, netnsPath, ifName, { network }));
    const fastDetails = async (): Promise<Record<string, string>> =>
      (await daemon.client.status()).networks.find((x) => x.name === 'fast')?.backendDetails ?? {};

    /** Connects the agent (a new boot id is a DPU that rebooted) and acks its snapshot as `endpoint` says. */
    async function connect(bootId: string, endpoint: (port: Port) => string = () => ''): Promise<void> {
      clearInterval(answering);
      if (agent) {
        agent.close();
        await waitUntil(async () => (await fastDetails()).agentsHealthy === '0', 'the old session gone');
      }
      agent = new RawAgent(path.join(dir, 'agent.sock'));
      answered = 0;
      agent.send(
        RawAgent.hello(AGENT_ID, {
          bootId,
          capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: ['host-endpoint'] },
        }),
      );
      await agent.next((m) => !!m.snapshotBegin, 'the snapshot');
      const complete = await agent.next((m) => !!m.syncComplete, 'the end of the snapshot');
      for (const m of agent.received) {
        const port = m.upsert?.port;
        if (port) agent.send(okAck(port.name, port.generation, { endpoint: vf(endpoint(port), port) }));
      }
      expect(complete.syncComplete?.portCount).to.be.a('number');
      agent.keepAlive(100);
      // Deletes are answered as a well-behaved agent would, so that Detach does not wait for them.
      answering = setInterval(() => {
        const deletes = agent.received.filter((m) => !!m.delete);
        for (const m of deletes.slice(answered)) agent.send(okAck(m.delete!.name, m.delete!.generation));
        answered = deletes.length;
      }, 20);
      await waitUntil(async () => (await fastDetails()).agentsHealthy === '1', 'the agent healthy');
    }

    function vf(netdev: string, port: Port) {
      return netdev ? { netdev, mac: port.mac, pciAddress: '', representor: '' } : undefined;
    }

    /**
     * Attaches eth0 (Linux) and net1 (the agent's VF `vfName`, made with the port's MAC) to a new
     * workload; returns it with the net1 port.
     */
    async function workloadWithTwoNetworks(
      vfName: string,
    ): Promise<{ w: { name: string; path: string }; id: string; port: Port }> {
      n++;
      const w = namespaces.add();
      const id = `reack-${n}`;
      await attach(id, w.path, 'eth0');
      const from = agent.received.length;
      const attaching = attach(id, w.path, 'net1', 'fast');
      const port = (await agent.next((m) => !!m.upsert, 'the upsert', 10_000, from)).upsert!.port!;
      ip('link', 'add', vfName, 'address', port.mac, 'type', 'veth', 'peer', 'name', `${vfName}p`);
      agent.send(okAck(port.name, port.generation, { endpoint: vf(vfName, port) }));
      await attaching;
      expect(names(w.name)).to.have.members(['lo', 'eth0', 'net1']);
      return { w, id, port };
    }

    /** The agent's VF goes away (its DPU end removed), and with it the workload's net1. */
    async function vfGone(vfName: string, w: { name: string }): Promise<void> {
      ip('link', 'del', `${vfName}p`);
      await waitUntil(() => !names(w.name).includes('net1'), 'net1 gone with its VF');
    }

    /** The workload's eth0 is where it was: in its namespace, up, its routes and addresses intact. */
    async function expectEth0Intact(w: { name: string }, id: string): Promise<void> {
      const eth0 = links(w.name).find((l) => l.ifname === 'eth0');
      expect(eth0, "the workload's eth0").to.not.equal(undefined);
      expect(eth0?.flags).to.include('UP');
      expect(names(node), 'no eth0 in the host namespace').to.not.include('eth0');
      const check = await daemon.client.call(daemon.client.raw.check, { workloadId: id, ifName: 'eth0' });
      expect(check.drift).to.deep.equal([]);
      expect(await pings(w.name, peerAddress, { from: 'eth0' }), 'eth0 still carries traffic').to.equal(true);
    }

    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-reack-'));
      node = namespaces.add().name;
      addNodeUplink(node, '10.250.0.1');
      const config = {
        dpu: { agentSocket: path.join(dir, 'agent.sock') },
        networks: [
          { name: 'default', backend: 'linux', podCidrs: [DEFAULT_CIDR] },
          { name: 'fast', backend: 'dpu', podCidrs: [FAST_CIDR] },
        ],
      };
      daemon = await DaemonProcess.start({ dir, netns: node, config });
      await connect('boot-1');
      peer = namespaces.add();
      peerAddress = v4(await attach('reack-peer', peer.path, 'eth0'));
    });

    after(async () => {
      clearInterval(answering);
      agent?.close();
      await daemon?.stop();
      namespaces.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it("refuses a re-ack naming the workload's eth0 and reports it; Detach of net1 leaves eth0 up in the workload", async () => {
      const { w, id, port } = await workloadWithTwoNetworks('vfreack1');
      const refusedBefore = Number((await fastDetails()).refusedEndpointChanges ?? 0);
      agent.send(okAck(port.name, port.generation, { endpoint: vf('eth0', port) }));
      // A status after it on the same stream: once the daemon has it, it has read the re-ack too.
      agent.send({
        portStatus: { name: port.name, operState: PortOperState.PORT_OPER_STATE_DOWN, message: 'after' },
      });
      await waitUntil(
        async () =>
          (await daemon.client.call(daemon.client.raw.check, { workloadId: id, ifName: 'net1' })).drift.some(
            (d) => d.kind === 'port-down',
          ),
        'the daemon to have read the re-ack',
      );
      await vfGone('vfreack1', w);

      await daemon.client.call(daemon.client.raw.detach, detachRequest(id, w.path, 'net1'));
      await expectEth0Intact(w, id);
      const list = await daemon.client.call(daemon.client.raw.list, {});
      expect(list.attachments.filter((a) => a.workloadId === id).map((a) => a.ifName)).to.deep.equal([
        'eth0',
      ]);

      expect(Number((await fastDetails()).refusedEndpointChanges)).to.equal(refusedBefore + 1);
      expect(fs.readFileSync(daemon.logFile, 'utf8')).to.match(
        /refused an ack naming another endpoint for a port already plumbed.*"endpoint":"vfreack1".*"offered":"eth0"|"endpoint":"vfreack1".*"offered":"eth0".*refused an ack naming another endpoint/,
      );
    });

    it('moves out only the link it moved in, even when a rebooted agent names eth0 for the port', async () => {
      const { w, id } = await workloadWithTwoNetworks('vfreack2');
      // A new boot may rename its VFs, so its word is taken for the port; Detach still must not follow it.
      await connect('boot-2', (p) => (p.name === `${id}/net1` ? 'eth0' : ''));
      await vfGone('vfreack2', w);
      await daemon.client.call(daemon.client.raw.detach, detachRequest(id, w.path, 'net1'));
      await expectEth0Intact(w, id);
    });

    it('hands the VF it moved in back to the host under its own name, whatever the agent named since', async () => {
      const { w, id } = await workloadWithTwoNetworks('vfreack3');
      await connect('boot-3', (p) => (p.name === `${id}/net1` ? 'eth0' : ''));
      await daemon.client.call(daemon.client.raw.detach, detachRequest(id, w.path, 'net1'));
      expect(names(w.name)).to.have.members(['lo', 'eth0']);
      expect(names(node)).to.include('vfreack3');
      await expectEth0Intact(w, id);
    });
  },
);
