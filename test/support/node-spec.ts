import type { NodeSpec } from './fabric-topology';

/** A node of a FabricTopology whose host number is also the third octet of its pod range. */
export function nodeSpec(
  name: string,
  subnet: NodeSpec['subnet'],
  n: number,
  over: Partial<NodeSpec> = {},
): NodeSpec {
  return { name, subnet, host: n, podRange: n, ...over };
}
