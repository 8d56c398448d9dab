import type { V1Namespace, V1NetworkPolicy, V1Pod } from '@kubernetes/client-node';
import { type Cidr, cidrContains, familyBits, formatAddress, parseAddress, parseCidr } from '../../lib/cidr';
import type {
  LabelRequirement,
  LabelSelector,
  NamedPort,
  NetworkPolicy,
  PolicyNamespace,
  PolicyPeer,
  PolicyPod,
  PolicyPort,
  PolicyProtocol,
  PolicyRule,
  PolicyType,
} from '../../core/policy-source';

// The Kubernetes API's objects as the policy model holds them (core/policy-source.ts). Objects come
// from a typed list or from raw watch events, so every field is read as untrusted JSON.
//
// A NetworkPolicy is checked as the API server's validation would check it: one the API would refuse
// (an unknown selector operator, a malformed cidr, an except outside its cidr, an endPort without a
// numeric port or below it) can still reach us from an API server of another version or a hand-made
// stand-in, and its meaning is unknown. It is refused whole, in words, never guessed at: reading a
// broken peer as "every peer" would allow all, dropping a broken rule would deny what it allowed.

/** Phases whose pods have released their addresses: a policy has nothing to select there. */
const TERMINAL_PHASES = new Set(['Succeeded', 'Failed']);
const PROTOCOLS = new Set<string>(['TCP', 'UDP', 'SCTP']);
const OPERATORS = new Set<string>(['In', 'NotIn', 'Exists', 'DoesNotExist']);
/** An IANA service name, as a container port's and a policy's named port must be. */
const PORT_NAME = /^(?=.*[a-z])[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,14}$/;

export function namespaceFromApi(ns: V1Namespace): PolicyNamespace | undefined {
  const name = ns.metadata?.name;
  if (!name) return undefined;
  return { name, labels: labelsOf(ns.metadata?.labels) };
}

/** The pod as the model holds it; undefined for a pod that is done (Succeeded, Failed) or nameless. */
export function podFromApi(pod: V1Pod): PolicyPod | undefined {
  const { name, namespace } = pod.metadata ?? {};
  if (!name || !namespace) return undefined;
  if (TERMINAL_PHASES.has(pod.status?.phase ?? '')) return undefined;
  const reported = pod.status?.podIPs?.map((p) => p.ip) ?? (pod.status?.podIP ? [pod.status.podIP] : []);
  const ips: string[] = [];
  for (const ip of reported) {
    const canonical = canonicalAddress(ip);
    // The API validates podIPs; one we cannot read selects nothing rather than something else.
    if (canonical !== undefined && !ips.includes(canonical)) ips.push(canonical);
  }
  const namedPorts: NamedPort[] = [];
  // A sidecar (an init container that keeps running: restartPolicy Always) serves for the pod's life,
  // so its ports are the pod's as much as a container's; other init containers are gone by then.
  const sidecars = (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
  for (const c of [...(pod.spec?.containers ?? []), ...sidecars])
    for (const p of c.ports ?? []) {
      const protocol = p.protocol ?? 'TCP';
      if (!p.name || !PROTOCOLS.has(protocol) || !isPortNumber(p.containerPort)) continue;
      namedPorts.push({ name: p.name, protocol: protocol as PolicyProtocol, port: p.containerPort });
    }
  return {
    namespace,
    name,
    uid: pod.metadata?.uid ?? '',
    labels: labelsOf(pod.metadata?.labels),
    ips,
    namedPorts,
    nodeName: pod.spec?.nodeName ?? '',
    hostNetwork: pod.spec?.hostNetwork === true,
  };
}

/** A NetworkPolicy checked and normalised, or the reason it is refused (its namespace/name first). */
export function policyFromApi(
  obj: V1NetworkPolicy,
): { policy: NetworkPolicy } | { refused: string } | undefined {
  const { name, namespace } = obj.metadata ?? {};
  if (!name || !namespace) return undefined;
  try {
    return { policy: checkPolicy(namespace, name, obj.spec) };
  } catch (err) {
    if (!(err instanceof PolicyRefusal)) throw err;
    return {
      refused:
        `NetworkPolicy ${namespace}/${name} refused: ${err.message}; it is left out ` +
        '(the pods it selects are isolated only by the other policies)',
    };
  }
}

class PolicyRefusal extends Error {}

function refuse(path: string, what: string): never {
  throw new PolicyRefusal(`${path} ${what}`);
}

function checkPolicy(namespace: string, name: string, spec: V1NetworkPolicy['spec']): NetworkPolicy {
  if (!isObject(spec)) refuse('spec', 'is missing');
  const ingress = rulesOf(spec.ingress, 'spec.ingress', 'from');
  const egress = rulesOf(spec.egress, 'spec.egress', 'to');
  return {
    namespace,
    name,
    podSelector: selectorOf(spec.podSelector ?? {}, 'spec.podSelector'),
    policyTypes: policyTypesOf(spec.policyTypes, egress.length > 0),
    ingress,
    egress,
  };
}

/** The API's default when absent: Ingress, plus Egress when the policy has egress rules. */
function policyTypesOf(types: unknown, hasEgress: boolean): PolicyType[] {
  if (types === undefined || types === null || (Array.isArray(types) && types.length === 0))
    return hasEgress ? ['Ingress', 'Egress'] : ['Ingress'];
  if (!Array.isArray(types)) refuse('spec.policyTypes', 'is not a list');
  const out: PolicyType[] = [];
  types.forEach((t: unknown, i) => {
    if (t !== 'Ingress' && t !== 'Egress')
      refuse(`spec.policyTypes[${i}]`, `is ${JSON.stringify(t)}, not Ingress or Egress`);
    if (!out.includes(t)) out.push(t);
  });
  return out;
}

function rulesOf(rules: unknown, path: string, peersKey: 'from' | 'to'): PolicyRule[] {
  if (rules === undefined || rules === null) return [];
  if (!Array.isArray(rules)) refuse(path, 'is not a list');
  return rules.map((rule: unknown, i) => {
    const at = `${path}[${i}]`;
    if (!isObject(rule)) refuse(at, 'is not an object');
    const out: PolicyRule = {};
    const ports = listOf(rule.ports, `${at}.ports`).map((p, j) => portOf(p, `${at}.ports[${j}]`));
    // A typed list names `from` `_from` (a reserved word in its generator); a watch event does not.
    const given = peersKey === 'from' ? (rule.from ?? rule._from) : rule.to;
    const peers = listOf(given, `${at}.${peersKey}`).map((p, j) => peerOf(p, `${at}.${peersKey}[${j}]`));
    if (ports.length > 0) out.ports = ports;
    if (peers.length > 0) out.peers = peers;
    return out;
  });
}

function portOf(port: unknown, path: string): PolicyPort {
  if (!isObject(port)) refuse(path, 'is not an object');
  const out: PolicyPort = {};
  const protocol = port.protocol ?? 'TCP';
  if (typeof protocol !== 'string' || !PROTOCOLS.has(protocol))
    refuse(`${path}.protocol`, `is ${JSON.stringify(protocol)}, not TCP, UDP or SCTP`);
  out.protocol = protocol as PolicyProtocol;
  const { port: p, endPort } = port;
  if (typeof p === 'number') {
    if (!isPortNumber(p)) refuse(`${path}.port`, `is ${p}, not a port number 1-65535`);
    out.port = p;
  } else if (typeof p === 'string') {
    if (!PORT_NAME.test(p))
      refuse(`${path}.port`, `is ${JSON.stringify(p)}, neither a port number nor a port name`);
    out.port = p;
  } else if (p !== undefined && p !== null) refuse(`${path}.port`, 'is neither a number nor a name');
  if (endPort !== undefined && endPort !== null) {
    if (typeof out.port !== 'number') refuse(`${path}.endPort`, 'is set without a numeric port');
    if (!isPortNumber(endPort) || endPort < out.port)
      refuse(`${path}.endPort`, `is ${String(endPort)}, not a port number from ${out.port} to 65535`);
    out.endPort = endPort;
  }
  return out;
}

function peerOf(peer: unknown, path: string): PolicyPeer {
  if (!isObject(peer)) refuse(path, 'is not an object');
  const { ipBlock, podSelector, namespaceSelector } = peer;
  const has = (v: unknown): boolean => v !== undefined && v !== null;
  if (has(ipBlock)) {
    if (has(podSelector) || has(namespaceSelector))
      refuse(path, 'has an ipBlock beside a selector: a peer is one or the other');
    return { ipBlock: ipBlockOf(ipBlock, `${path}.ipBlock`) };
  }
  if (!has(podSelector) && !has(namespaceSelector))
    refuse(path, 'names no peer: it needs an ipBlock, a podSelector or a namespaceSelector');
  const out: PolicyPeer = {};
  if (has(podSelector)) out.podSelector = selectorOf(podSelector, `${path}.podSelector`);
  if (has(namespaceSelector))
    out.namespaceSelector = selectorOf(namespaceSelector, `${path}.namespaceSelector`);
  return out;
}

function ipBlockOf(block: unknown, path: string): { cidr: string; except?: string[] } {
  if (!isObject(block)) refuse(path, 'is not an object');
  const cidr = cidrOf(block.cidr, `${path}.cidr`);
  const except = listOf(block.except, `${path}.except`).map((e, i) => {
    const at = `${path}.except[${i}]`;
    const inner = cidrOf(e, at);
    // As the API checks it: a strict subset of the cidr, of its family.
    if (
      inner.family !== cidr.family ||
      inner.prefixLength <= cidr.prefixLength ||
      !cidrContains(cidr, inner.network)
    )
      refuse(at, `${inner.text} is not inside cidr ${cidr.text}`);
    return inner.text;
  });
  return except.length > 0 ? { cidr: cidr.text, except } : { cidr: cidr.text };
}

/**
 * A CIDR in canonical text. Host bits are cleared, as the API server's parser does when it reads
 * "10.0.0.1/24" (it accepts it as 10.0.0.0/24); anything else unreadable is refused.
 */
function cidrOf(text: unknown, path: string): Cidr {
  if (typeof text !== 'string') refuse(path, 'is not a CIDR');
  const slash = text.indexOf('/');
  try {
    if (slash < 0) return parseCidr(text);
    const addr = parseAddress(text.slice(0, slash));
    const masked = parseMasked(addr, text.slice(slash + 1));
    return parseCidr(masked);
  } catch (err) {
    refuse(path, `is ${JSON.stringify(text)}, not a CIDR (${(err as Error).message})`);
  }
}

function parseMasked(addr: { family: 4 | 6; value: bigint }, prefixText: string): string {
  const bits = familyBits(addr.family);
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > bits)
    throw new Error(`prefix length must be a number 0-${bits}`);
  const host = BigInt(bits - Number(prefixText));
  return `${formatAddress(addr.family, (addr.value >> host) << host)}/${prefixText}`;
}

function selectorOf(selector: unknown, path: string): LabelSelector {
  if (!isObject(selector)) refuse(path, 'is not a label selector');
  const out: LabelSelector = {};
  const { matchLabels, matchExpressions } = selector;
  if (matchLabels !== undefined && matchLabels !== null) {
    if (!isObject(matchLabels)) refuse(`${path}.matchLabels`, 'is not a map of labels');
    for (const [k, v] of Object.entries(matchLabels))
      if (typeof v !== 'string' || k === '')
        refuse(`${path}.matchLabels`, `has a bad label ${JSON.stringify(k)}`);
    if (Object.keys(matchLabels).length > 0) out.matchLabels = { ...(matchLabels as Record<string, string>) };
  }
  const exprs = listOf(matchExpressions, `${path}.matchExpressions`).map((e, i) =>
    requirementOf(e, `${path}.matchExpressions[${i}]`),
  );
  if (exprs.length > 0) out.matchExpressions = exprs;
  return out;
}

function requirementOf(expr: unknown, path: string): LabelRequirement {
  if (!isObject(expr)) refuse(path, 'is not an object');
  const { key, operator, values } = expr;
  if (typeof key !== 'string' || key === '') refuse(`${path}.key`, 'is missing');
  if (typeof operator !== 'string' || !OPERATORS.has(operator))
    refuse(`${path}.operator`, `is ${JSON.stringify(operator)}, not In, NotIn, Exists or DoesNotExist`);
  const list = listOf(values, `${path}.values`);
  if (list.some((v) => typeof v !== 'string')) refuse(`${path}.values`, 'holds a value that is not a string');
  const op = operator as LabelRequirement['operator'];
  if ((op === 'In' || op === 'NotIn') && list.length === 0)
    refuse(`${path}.values`, `is empty, and operator ${op} needs at least one value`);
  if ((op === 'Exists' || op === 'DoesNotExist') && list.length > 0)
    refuse(`${path}.values`, `must be empty with operator ${op}`);
  return list.length > 0 ? { key, operator: op, values: list as string[] } : { key, operator: op };
}

function listOf(value: unknown, path: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) refuse(path, 'is not a list');
  return value;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isPortNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65535;
}

function labelsOf(labels: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!isObject(labels)) return out;
  for (const [k, v] of Object.entries(labels)) if (typeof v === 'string') out[k] = v;
  return out;
}

function canonicalAddress(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined;
  try {
    const { family, value } = parseAddress(text);
    return formatAddress(family, value);
  } catch {
    return undefined;
  }
}
