import {
  PolicyProtocol,
  type PolicyDirection,
  type PolicyObject,
  type PortPolicy,
} from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { NftDirectionPolicy, NftPolicyProtocol, NftPolicyRule } from '../../lib/nftables/policy-program';
import { checkPod, setPrefixes, PolicyProgramError } from '../../lib/nftables/policy-program';

// The policy objects of protocol version 4 as the agent checks and holds them: an AddressSet or a
// PortPolicy per name, read into the toolkit's program types (lib/nftables/policy-program.ts), and
// refused in words, before anything changes, when one cannot be enforced as given.

export const SET_PREFIX = 'set/';
export const PORT_PREFIX = 'port/';

const PROTOCOLS: Partial<Record<PolicyProtocol, NftPolicyProtocol>> = {
  [PolicyProtocol.POLICY_PROTOCOL_TCP]: 'TCP',
  [PolicyProtocol.POLICY_PROTOCOL_UDP]: 'UDP',
  [PolicyProtocol.POLICY_PROTOCOL_SCTP]: 'SCTP',
};

/** One direction of a port policy as the toolkit's rules; throws PolicyProgramError in words. */
export function directionOf(where: string, d: PolicyDirection | undefined): NftDirectionPolicy | undefined {
  if (!d) return undefined;
  const rules = d.rules.map((r, i): NftPolicyRule => {
    if (r.anyAddress && r.sets.length > 0)
      throw new PolicyProgramError(`${where} rule ${i}: any_address with sets ${r.sets.join(', ')}`);
    if (r.anyPort && r.ports.length > 0)
      throw new PolicyProgramError(`${where} rule ${i}: any_port with ${r.ports.length} ports`);
    return {
      sets: r.anyAddress ? undefined : r.sets,
      ports: r.anyPort
        ? undefined
        : r.ports.map((p) => {
            const protocol = PROTOCOLS[p.protocol];
            if (!protocol) throw new PolicyProgramError(`${where} rule ${i}: unknown protocol ${p.protocol}`);
            return { protocol, port: p.port || undefined, endPort: p.endPort || undefined };
          }),
    };
  });
  return { rules };
}

export type HeldObject =
  | { kind: 'set'; name: string; generation: number; prefixes: string[] }
  | { kind: 'port'; name: string; generation: number; policy: PortPolicy };

/**
 * Reads one object, checked alone and against the sets `sets` holds (a port policy names only sets
 * sent before it). Throws PolicyProgramError, in words, for what cannot be enforced.
 */
export function readPolicyObject(o: PolicyObject, sets: ReadonlyMap<string, readonly string[]>): HeldObject {
  if (o.name.startsWith(SET_PREFIX)) {
    const set = o.name.slice(SET_PREFIX.length);
    if (!o.addressSet || o.portPolicy)
      throw new PolicyProgramError(`policy object ${o.name}: a "set/" name must carry an address set`);
    if (!set) throw new PolicyProgramError(`policy object ${o.name}: the set has no name`);
    setPrefixes(set, o.addressSet.prefixes);
    return { kind: 'set', name: o.name, generation: o.generation, prefixes: o.addressSet.prefixes };
  }
  if (o.name.startsWith(PORT_PREFIX)) {
    const p = o.portPolicy;
    if (!p || o.addressSet)
      throw new PolicyProgramError(`policy object ${o.name}: a "port/" name must carry a port policy`);
    if (p.port !== o.name.slice(PORT_PREFIX.length))
      throw new PolicyProgramError(`policy object ${o.name}: names port ${JSON.stringify(p.port)}`);
    const where = `port policy of ${p.port}`;
    // The interface is the agent's own (its representor); checked here for the rules alone.
    checkPod(
      {
        key: p.port,
        hostIf: 'rp0',
        ingress: directionOf(`${where}: ingress`, p.ingress),
        egress: directionOf(`${where}: egress`, p.egress),
      },
      sets,
    );
    return { kind: 'port', name: o.name, generation: o.generation, policy: p };
  }
  throw new PolicyProgramError(
    `policy object ${JSON.stringify(o.name.slice(0, 64))}: the name must start with "set/" or "port/"`,
  );
}
