import type { ServerResponse } from 'node:http';
import type { KubeObjectStore, ObjectFilter, StoredObject } from './standin-kube-store';

// The stand-in API server's Namespaces, Pods and networking.k8s.io/v1 NetworkPolicies: what a
// NetworkPolicy source lists, watches and reads (standin-kube-apiserver.ts serves them). Objects are
// written as the real API server returns them; a policy's spec is stored as given, unchecked, so a
// test can hand the source one the real API would have refused.

export const NAMESPACES = 'namespaces';
export const PODS = 'pods';
export const NETWORK_POLICIES = 'networkpolicies';

export interface StandInPort {
  name?: string;
  containerPort: number;
  protocol?: 'TCP' | 'UDP' | 'SCTP';
}

/** A pod as a test describes it; the stand-in writes it as the API server and the kubelet would. */
export interface StandInPod {
  namespace: string;
  name: string;
  /** Default: uid-NAMESPACE-NAME. */
  uid?: string;
  labels?: Record<string, string>;
  /** status.podIPs (and podIP, the first). */
  ips?: string[];
  ports?: StandInPort[];
  nodeName?: string;
  hostNetwork?: boolean;
  /** Default Running. */
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';
}

export function namespaceObject(name: string, labels: Record<string, string>): StoredObject {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    // The API server labels every namespace with its own name (1.21 and later).
    metadata: {
      name,
      uid: `uid-ns-${name}`,
      resourceVersion: '',
      labels: { 'kubernetes.io/metadata.name': name, ...labels },
    },
    spec: { finalizers: ['kubernetes'] },
    status: { phase: 'Active' },
  };
}

export function podObject(p: StandInPod): StoredObject {
  const ips = p.ips ?? [];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: p.name,
      namespace: p.namespace,
      uid: p.uid ?? `uid-${p.namespace}-${p.name}`,
      resourceVersion: '',
      ...(p.labels ? { labels: p.labels } : {}),
    },
    spec: {
      containers: [{ name: 'main', image: 'registry.example/app:1', ...(p.ports ? { ports: p.ports } : {}) }],
      ...(p.nodeName ? { nodeName: p.nodeName } : {}),
      ...(p.hostNetwork ? { hostNetwork: true } : {}),
    },
    status: {
      phase: p.phase ?? 'Running',
      ...(ips.length > 0 ? { podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) } : {}),
    },
  };
}

export function networkPolicyObject(namespace: string, name: string, spec: unknown): StoredObject {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name, namespace, uid: `uid-np-${namespace}-${name}`, resourceVersion: '' },
    spec,
  };
}

const LISTS: Record<string, { kind: string; apiVersion: string }> = {
  [NAMESPACES]: { kind: 'NamespaceList', apiVersion: 'v1' },
  [PODS]: { kind: 'PodList', apiVersion: 'v1' },
  [NETWORK_POLICIES]: { kind: 'NetworkPolicyList', apiVersion: 'networking.k8s.io/v1' },
};

/** What a request for one of these kinds asks: a list or watch of a collection, or a read of one object. */
export type PolicyKindRequest =
  | { verb: 'list' | 'watch'; collection: string; matches: ObjectFilter }
  | { verb: 'get'; collection: string; key: string };

/** The request's meaning when it is for one of these kinds' paths, else undefined. */
export function policyKindRequest(url: URL): PolicyKindRequest | undefined {
  const p = url.pathname;
  const watch = url.searchParams.get('watch') === 'true';
  const collection = (collection: string, namespace?: string): PolicyKindRequest => ({
    verb: watch ? 'watch' : 'list',
    collection,
    matches: (o) => namespace === undefined || o.metadata.namespace === namespace,
  });
  if (p === '/api/v1/namespaces') return collection(NAMESPACES);
  if (p === '/api/v1/pods') return collection(PODS);
  if (p === '/apis/networking.k8s.io/v1/networkpolicies') return collection(NETWORK_POLICIES);
  let m = /^\/api\/v1\/namespaces\/([^/]+)\/pods(?:\/([^/]+))?$/.exec(p);
  if (m) {
    const ns = decodeURIComponent(m[1]!);
    return m[2]
      ? { verb: 'get', collection: PODS, key: `${ns}/${decodeURIComponent(m[2])}` }
      : collection(PODS, ns);
  }
  m = /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies$/.exec(p);
  if (m) return collection(NETWORK_POLICIES, decodeURIComponent(m[1]!));
  return undefined;
}

/** Answers a list, watch or read of these kinds from `store`. */
export function servePolicyKind(
  store: KubeObjectStore,
  r: PolicyKindRequest,
  url: URL,
  res: ServerResponse,
): void {
  const reply = (code: number, body: unknown): void => {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (r.verb === 'get') {
    const obj = store.get(r.collection, r.key);
    if (obj) return reply(200, obj);
    return reply(404, {
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      reason: 'NotFound',
      message: `${r.collection} "${r.key.split('/')[1]}" not found`,
      code: 404,
    });
  }
  if (r.verb === 'list') {
    const { resourceVersion, items } = store.list(r.collection, r.matches);
    return reply(200, { ...LISTS[r.collection], metadata: { resourceVersion }, items });
  }
  const rv = url.searchParams.get('resourceVersion');
  store.watch(r.collection, r.matches, rv ? Number(rv) : undefined, res);
}
