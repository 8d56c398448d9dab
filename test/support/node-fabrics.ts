import { LinuxFabric, type LinuxFabricOptions } from '../../backends/linux/fabric/linux-fabric';
import type { LocalNode } from '../../core/fabric-dataplane';
import { netnsPath } from './netns';

// The Linux fabrics a test opens on the node namespaces of its topology: the last one opened on a node
// is that node's, and every one opened is stopped at the end, as a daemon that exits would.

export class NodeFabrics {
  private readonly byNode = new Map<string, LinuxFabric>();
  private readonly opened: LinuxFabric[] = [];
  /** What each node's fabric prepared, by node name: what a topology's peersOf builds the peers from. */
  readonly locals = new Map<string, LocalNode>();

  /** A new fabric on the node's namespace (no link monitor unless `over` asks for one). */
  open(node: { name: string; ns: string }, over: Partial<LinuxFabricOptions> = {}): LinuxFabric {
    const f = new LinuxFabric({ hostNetnsPath: netnsPath(node.ns), monitor: false, ...over });
    this.opened.push(f);
    this.byNode.set(node.name, f);
    return f;
  }

  /** The node's fabric: the last opened on it. */
  of(node: { name: string } | string): LinuxFabric {
    const name = typeof node === 'string' ? node : node.name;
    const f = this.byNode.get(name);
    if (!f) throw new Error(`no fabric on ${name}`);
    return f;
  }

  /** Stops every fabric opened so far (they are forgotten). */
  async stopAll(): Promise<void> {
    this.byNode.clear();
    for (const f of this.opened.splice(0)) await f.stop();
  }
}
