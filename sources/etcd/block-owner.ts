// Who a block belongs to, as the value of its key: the node, and with DPUs the tunnel endpoint (DPU)
// of that node whose pods it addresses. A node's own block keeps the value it always had, the bare
// node name, so blocks claimed before endpoints existed (and by daemons that know nothing of them)
// read the same; an endpoint's block is the JSON {"node","endpoint"}. A node name never starts with
// "{" (a DNS label), which is how the two are told apart.

export interface BlockOwner {
  node: string;
  /** The DPU (agent id) of `node` the block is claimed for; absent: the node's own block. */
  endpoint?: string;
}

/** The value a block key holds for `owner`. */
export function encodeOwner(owner: BlockOwner): string {
  return owner.endpoint === undefined
    ? owner.node
    : JSON.stringify({ node: owner.node, endpoint: owner.endpoint });
}

/** The owner a block key's value names, or undefined when the value is malformed. */
export function decodeOwner(value: string): BlockOwner | undefined {
  if (!value.startsWith('{')) return value.length > 0 ? { node: value } : undefined;
  let v: unknown;
  try {
    v = JSON.parse(value);
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null) return undefined;
  const { node, endpoint } = v as Record<string, unknown>;
  if (typeof node !== 'string' || node === '' || typeof endpoint !== 'string' || endpoint === '')
    return undefined;
  return { node, endpoint };
}

/** How Status and logs name an owner: "n1", or "n1/dpu-a" for an endpoint's block. */
export function describeOwner(owner: BlockOwner): string {
  return owner.endpoint === undefined ? owner.node : `${owner.node}/${owner.endpoint}`;
}

export const sameOwner = (a: BlockOwner, b: BlockOwner): boolean =>
  a.node === b.node && a.endpoint === b.endpoint;
