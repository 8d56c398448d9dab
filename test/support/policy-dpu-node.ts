import * as fs from 'node:fs';
import * as path from 'node:path';
import { NetnsSet, type TestNamespace } from './netns';
import { PolicyNode, type PolicyNodeOptions } from './policy-node';
import { SimProcess } from './sim-process';
import { netnsDataplane } from './simulated-dpu';

// One node under NetworkPolicy whose pods are on a DPU network: the same node as policy-node.ts (the
// real daemon, the stand-in API server, pods attached with their identity, a prober in each), with the
// DPU backend, and the simulator as a real process in netns mode standing for the DPU: each pod's
// interface is a VF moved into its namespace, and its traffic crosses the DPU's namespace, where the
// simulator enforces the policy. The simulator starts with the node's namespace and dials the
// daemon's agent socket until the daemon is up; the node is ready once it is connected.

/** The node's namespaces, with the DPU's simulator started as soon as the node's namespace exists. */
class DpuNodeNamespaces extends NetnsSet {
  sim: SimProcess | undefined;
  dpu: TestNamespace | undefined;

  constructor(
    prefix: string,
    private readonly socket: string,
    private readonly simArgs: string[],
  ) {
    super(prefix);
  }

  override addNode(address: string): TestNamespace {
    const node = super.addNode(address);
    this.dpu = this.add('dpu');
    this.sim = SimProcess.start({
      socket: this.socket,
      agentId: 'policy-dpu',
      stateFile: path.join(path.dirname(this.socket), 'sim.json'),
      extra: [...netnsDataplane(this.dpu.name, node.path), ...this.simArgs],
    });
    return node;
  }
}

export interface PolicyDpuNode {
  node: PolicyNode;
  namespaces: { dpu: TestNamespace | undefined; cleanup(): void };
  sim(): SimProcess | undefined;
}

/** Starts the node; `simArgs` go to the simulator (`--protocol 1-3` plays an agent without policy). */
export async function startPolicyDpuNode(
  o: Omit<PolicyNodeOptions, 'namespaces'> & { prefix: string; simArgs?: string[] },
): Promise<PolicyDpuNode> {
  const dir = path.join(o.root, o.name);
  fs.mkdirSync(dir, { recursive: true });
  const socket = path.join(dir, 'agent.sock');
  const namespaces = new DpuNodeNamespaces(o.prefix, socket, o.simArgs ?? []);
  const node = await PolicyNode.start({
    ...o,
    namespaces,
    flags: { backend: 'dpu', 'agent-socket': socket, ...o.flags },
  });
  return { node, namespaces, sim: () => namespaces.sim };
}
