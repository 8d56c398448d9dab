// The seam between the NetworkPolicy model and where it comes from. A source (the Kubernetes API's
// Namespaces, Pods and networking.k8s.io/v1 NetworkPolicies; a file or etcd could follow) keeps the
// objects as plain, checked values; core/policy compiles them into rules for this node's pods.
//
// The values are the API's meaning, already normalised by the source: a policy's `policyTypes` always
// set (the API's default when absent: Ingress, plus Egress when it has egress rules), a selector that
// the API would refuse kept out of the model (reported by the source, never widened to "all").

/** The protocols a NetworkPolicy port may name. */
export type PolicyProtocol = 'TCP' | 'UDP' | 'SCTP';

export interface LabelRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  /** For In and NotIn: at least one value; for Exists and DoesNotExist: none. */
  values?: readonly string[];
}

/** A Kubernetes label selector: every part must hold; an empty selector selects everything. */
export interface LabelSelector {
  matchLabels?: Readonly<Record<string, string>>;
  matchExpressions?: readonly LabelRequirement[];
}

/** One entry of a rule's `from` or `to`: exactly one of an ipBlock, or pod and/or namespace selectors. */
export interface PolicyPeer {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: readonly string[] };
}

/** One entry of a rule's `ports`. */
export interface PolicyPort {
  /** Absent: TCP, as the API defaults it. */
  protocol?: PolicyProtocol;
  /** A number, or the name of a container port of the destination pod; absent: every port. */
  port?: number | string;
  /** With a numeric `port`: the last port of the range. */
  endPort?: number;
}

/** One ingress or egress rule: traffic matching any peer and any port is allowed. */
export interface PolicyRule {
  /** Absent or empty: every port. */
  ports?: readonly PolicyPort[];
  /** `from` (ingress) or `to` (egress); absent or empty: every peer. */
  peers?: readonly PolicyPeer[];
}

export type PolicyType = 'Ingress' | 'Egress';

export interface NetworkPolicy {
  namespace: string;
  name: string;
  /** Which pods of `namespace` it isolates; empty selects them all. */
  podSelector: LabelSelector;
  /** Always set (see the header). */
  policyTypes: readonly PolicyType[];
  ingress: readonly PolicyRule[];
  egress: readonly PolicyRule[];
}

export interface PolicyNamespace {
  name: string;
  labels: Readonly<Record<string, string>>;
}

/** A container port with a name, which a policy's named port resolves to on the destination pod. */
export interface NamedPort {
  name: string;
  protocol: PolicyProtocol;
  port: number;
}

export interface PolicyPod {
  namespace: string;
  name: string;
  uid: string;
  labels: Readonly<Record<string, string>>;
  /** `status.podIPs`, canonical text; empty until the kubelet reports them. */
  ips: readonly string[];
  namedPorts: readonly NamedPort[];
  /** `spec.nodeName`; empty while unscheduled. */
  nodeName: string;
  /** A pod on the node's own network: never selected by address, as it has none of its own. */
  hostNetwork: boolean;
}

/** `namespace/name`: how pods and policies are keyed. */
export function objectKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** Everything a source holds, as it is now. */
export interface PolicyState {
  namespaces: ReadonlyMap<string, PolicyNamespace>;
  /** Keyed by objectKey(). */
  pods: ReadonlyMap<string, PolicyPod>;
  /** Keyed by objectKey(). */
  policies: ReadonlyMap<string, NetworkPolicy>;
}

/** What changed, so that a listener recompiles only what it touches. */
export type PolicyChange =
  | { kind: 'namespace'; name: string }
  | { kind: 'pod'; key: string }
  | { kind: 'policy'; key: string }
  /** A full list replaced everything (the first list, a relist after 410 Gone). */
  | { kind: 'all' };

/** Who a CNI ADD says the pod is (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID). */
export interface PodIdentity {
  namespace: string;
  name: string;
  /** Empty when the runtime gave none: then any pod of that name is it. */
  uid: string;
}

export interface PolicySourceStatus {
  /** A full list of each kind is held. */
  synced: boolean;
  namespaces: number;
  pods: number;
  policies: number;
  /** Why it is not synced, or what it refused (a malformed policy, in words). */
  reasons: string[];
}

export interface PolicySource {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** True once a full list of each kind is held; losing the API afterwards keeps the last state. */
  synced(): boolean;
  state(): PolicyState;
  /** Called after each change is in state(); a listener must not throw. */
  onChange(listener: (change: PolicyChange) => void): void;
  /**
   * The pod as the API says it is now: from the watch when it holds it (with the same uid), else one
   * read of it. Undefined when the API says there is no such pod. Throws, in words, when it cannot be
   * known before `deadlineMs` (a monotonic time, performance.now()): the API is away, or not synced.
   */
  lookupPod(id: PodIdentity, deadlineMs: number): Promise<PolicyPod | undefined>;
  status(): PolicySourceStatus;
}

/** inversify identifier under which a policy source is bound (when policy is on). */
export const POLICY_SOURCE = Symbol.for('workloadnet.PolicySource');
