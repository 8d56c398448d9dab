import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import * as path from 'node:path';
import { NetnsHandle } from '../../lib/netns/netns-handle';
import {
  NAMESPACES,
  NETWORK_POLICIES,
  PODS,
  namespaceObject,
  networkPolicyObject,
  podObject,
  policyKindRequest,
  servePolicyKind,
  type StandInPod,
} from './standin-kube-policy-kinds';
import { KubeObjectStore, type StoredObject } from './standin-kube-store';

// A stand-in for the Kubernetes API server, written for the tests because no real one can be installed
// here. It speaks only what a node's pool, peer and policy sources use, as the real one does: HTTPS
// with a bearer token, Node get, list and watch (newline-delimited JSON events) with a metadata.name
// field selector and resourceVersion; a watch from a version older than the retained history gets an
// ERROR event with a 410 "Expired" Status, as after etcd compaction (standin-kube-store.ts); a merge
// patch (JSON or strategic) of a Node's metadata.annotations, on the Node or its status subresource
// (null removes a key); Namespaces, Pods and NetworkPolicies listed, watched and read
// (standin-kube-policy-kinds.ts). Tests drive it: change Nodes (ranges, addresses, annotations) and
// the policy kinds, drop watch connections, hold watch events back, expire history, leave reads
// unanswered, stop and start it.

interface NodeObject extends StoredObject {
  apiVersion: 'v1';
  kind: 'Node';
  metadata: { name: string; uid: string; resourceVersion: string; annotations?: Record<string, string> };
  spec: { podCIDR?: string; podCIDRs?: string[] };
  status?: { addresses?: NodeAddress[]; conditions?: NodeCondition[] };
}

export interface NodeCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
  lastHeartbeatTime?: string;
}

export interface NodeAddress {
  type: 'InternalIP' | 'ExternalIP' | 'Hostname';
  address: string;
}

const TOKEN = 'stand-in-token';

export interface StandInOptions {
  /**
   * A network namespace (path) to serve in rather than the test's own, on every address of it: a
   * daemon that runs in a test-owned node namespace (a container on it) reaches the API there, never
   * through the machine's own network.
   */
  netns?: string;
  /** Addresses the server certificate names besides 127.0.0.1 (where a client dials it in `netns`). */
  addresses?: string[];
}

export interface RequestLogEntry {
  verb: 'get' | 'list' | 'watch' | 'patch';
  /** The patched object's path, for a patch; the path of any request for Namespaces, Pods or NetworkPolicies. */
  path?: string;
  fieldSelector?: string;
  resourceVersion?: string;
}

export class StandInKubeApiServer {
  readonly requests: RequestLogEntry[] = [];
  private readonly objects = new KubeObjectStore();
  /** Reads of one object left unanswered while reads stall. */
  private stalled?: Set<ServerResponse>;
  private readonly sockets = new Set<Socket>();
  private server?: https.Server;
  private port = 0;

  private constructor(
    readonly dir: string,
    private readonly tls: { key: Buffer; cert: Buffer; ca: Buffer },
    private readonly netns?: string,
  ) {}

  static async start(dir: string, opts: StandInOptions = {}): Promise<StandInKubeApiServer> {
    fs.mkdirSync(dir, { recursive: true });
    makePki(dir, opts.addresses ?? []);
    const read = (f: string): Buffer => fs.readFileSync(path.join(dir, f));
    const s = new StandInKubeApiServer(
      dir,
      {
        key: read('server.key'),
        cert: read('server.crt'),
        ca: read('ca.crt'),
      },
      opts.netns,
    );
    await s.listen();
    return s;
  }

  /** The TCP port it serves on. */
  get listenPort(): number {
    return this.port;
  }

  /**
   * The files kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount for a pod of `namespace`
   * (token, ca.crt, namespace), written to `dir`, which is returned.
   */
  serviceAccount(dir: string, namespace: string): string {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'token'), TOKEN);
    fs.writeFileSync(path.join(dir, 'ca.crt'), this.tls.ca);
    fs.writeFileSync(path.join(dir, 'namespace'), namespace);
    return dir;
  }

  /** Starts serving (again, on the same port after stop()). */
  async listen(): Promise<void> {
    const server = https.createServer({ key: this.tls.key, cert: this.tls.cert }, (req, res) =>
      this.handle(req, res),
    );
    server.on('connection', (sock: Socket) => {
      this.sockets.add(sock);
      sock.on('close', () => this.sockets.delete(sock));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.once('listening', () => resolve());
      if (this.netns === undefined) return void server.listen(this.port, '127.0.0.1');
      // Without a host, listen() makes and binds its socket before it returns, so inside the window
      // the socket belongs to the namespace (with a host it would first look the address up, later).
      const ns = NetnsHandle.openSync(this.netns);
      try {
        ns.enter(() => server.listen(this.port));
      } finally {
        ns.close();
      }
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Stops serving and cuts every connection (the API server went away). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.dropWatches();
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** A kubeconfig for this server: its CA and a bearer token. */
  kubeconfig(): string {
    const file = path.join(this.dir, 'kubeconfig.yaml');
    const ca = this.tls.ca.toString('base64');
    fs.writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: stand-in',
        '  cluster:',
        `    server: https://127.0.0.1:${this.port}`,
        `    certificate-authority-data: ${ca}`,
        'users:',
        '- name: node',
        '  user:',
        `    token: ${TOKEN}`,
        'contexts:',
        '- name: stand-in',
        '  context: {cluster: stand-in, user: node}',
        'current-context: stand-in',
        '',
      ].join('\n'),
    );
    return file;
  }

  get resourceVersion(): number {
    return this.objects.resourceVersion;
  }

  /** Creates or replaces a Namespace with these labels (and kubernetes.io/metadata.name, as the API adds). */
  putNamespace(name: string, labels: Record<string, string> = {}): void {
    this.objects.put(NAMESPACES, namespaceObject(name, labels));
  }

  deleteNamespace(name: string): void {
    this.objects.delete(NAMESPACES, name);
  }

  /** Creates or replaces a Pod. */
  putPod(pod: StandInPod): void {
    this.objects.put(PODS, podObject(pod));
  }

  deletePod(namespace: string, name: string): void {
    this.objects.delete(PODS, `${namespace}/${name}`);
  }

  /** Creates or replaces a NetworkPolicy with this spec, stored unchecked (a test may give a malformed one). */
  putNetworkPolicy(namespace: string, name: string, spec: unknown): void {
    this.objects.put(NETWORK_POLICIES, networkPolicyObject(namespace, name, spec));
  }

  deleteNetworkPolicy(namespace: string, name: string): void {
    this.objects.delete(NETWORK_POLICIES, `${namespace}/${name}`);
  }

  /** Holds watch events back (a lagging watch) until called with false; lists and reads stay current. */
  holdWatchEvents(hold: boolean): void {
    this.objects.holdWatchEvents(hold);
  }

  /**
   * Leaves every read of one Pod unanswered (an API server that accepts the connection and then
   * hangs) until called with false, which cuts them; lists and watches are served.
   */
  stallReads(stall: boolean): void {
    if (stall) {
      this.stalled ??= new Set();
      return;
    }
    const held = this.stalled ?? new Set();
    this.stalled = undefined;
    for (const res of held) res.socket?.destroy();
  }

  /**
   * Creates or updates a Node's ranges (undefined = no podCIDRs at all); its addresses and annotations
   * stay as they are.
   */
  setNode(name: string, podCIDRs?: string[], legacyPodCIDR?: string): void {
    const existing = this.nodes(name);
    this.store({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name,
        uid: existing?.metadata.uid ?? `uid-${name}`,
        resourceVersion: '',
        ...(existing?.metadata.annotations ? { annotations: existing.metadata.annotations } : {}),
      },
      spec: {
        ...(legacyPodCIDR ? { podCIDR: legacyPodCIDR } : podCIDRs?.[0] ? { podCIDR: podCIDRs[0] } : {}),
        ...(podCIDRs ? { podCIDRs } : {}),
      },
      ...(existing?.status ? { status: existing.status } : {}),
    });
  }

  /** Sets an existing Node's status.addresses, as its kubelet reports them. */
  setAddresses(name: string, addresses: NodeAddress[]): void {
    const node = this.existing(name);
    this.store({ ...node, status: { ...node.status, addresses } });
  }

  /** Sets an existing Node's status.conditions, as its kubelet and a cloud's node controller report them. */
  setConditions(name: string, conditions: NodeCondition[]): void {
    const node = this.existing(name);
    this.store({ ...node, status: { ...node.status, conditions } });
  }

  /** Sets (or, with undefined, removes) an annotation of an existing Node, as a person or tool would. */
  setAnnotation(name: string, key: string, value: string | undefined): void {
    const node = this.existing(name);
    const annotations = { ...node.metadata.annotations };
    if (value === undefined) delete annotations[key];
    else annotations[key] = value;
    this.store({ ...node, metadata: { ...node.metadata, annotations } });
  }

  /** A copy of a Node as stored, or undefined. */
  node(name: string): NodeObject | undefined {
    const n = this.nodes(name);
    return n && (JSON.parse(JSON.stringify(n)) as NodeObject);
  }

  private nodes(name: string): NodeObject | undefined {
    return this.objects.get('nodes', name) as NodeObject | undefined;
  }

  private existing(name: string): NodeObject {
    const node = this.nodes(name);
    if (!node) throw new Error(`the stand-in has no Node ${name}`);
    return node;
  }

  /** Stores a Node at a new resourceVersion (ADDED, or MODIFIED when it exists) and tells the watchers. */
  private store(node: NodeObject): NodeObject {
    return this.objects.put('nodes', node);
  }

  deleteNode(name: string): void {
    this.objects.delete('nodes', name);
  }

  /** Ends every open watch response abruptly, as a dropped connection or an API server restart does. */
  dropWatches(): void {
    this.objects.dropWatches();
  }

  /** Forgets all history up to now: a watch resumed from an older version gets 410 Gone. */
  expireHistory(): void {
    this.objects.expireHistory();
  }

  count(verb: RequestLogEntry['verb']): number {
    return this.requests.filter((r) => r.verb === verb).length;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const reply = (code: number, body: unknown): void => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const status = (code: number, reason: string, message: string): void =>
      reply(code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, message, code });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return status(401, 'Unauthorized', 'Unauthorized');
    if (req.method === 'PATCH') {
      const target = /^\/api\/v1\/nodes\/([^/]+)(\/status)?$/.exec(url.pathname);
      if (!target) return status(404, 'NotFound', 'the stand-in patches nodes only');
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.requests.push({ verb: 'patch', path: url.pathname });
        const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
        if (type !== 'application/merge-patch+json' && type !== 'application/strategic-merge-patch+json')
          return status(415, 'UnsupportedMediaType', `the stand-in takes merge patches only, not "${type}"`);
        const node = this.nodes(decodeURIComponent(target[1]!));
        if (!node) return status(404, 'NotFound', `nodes "${target[1]}" not found`);
        let patch: unknown;
        try {
          patch = JSON.parse(Buffer.concat(chunks).toString());
        } catch {
          return status(400, 'BadRequest', 'the patch is not JSON');
        }
        const p = patch as {
          metadata?: { annotations?: Record<string, string | null> };
          status?: { conditions?: NodeCondition[] };
        };
        const keys = Object.keys(p ?? {});
        const metaKeys = Object.keys(p?.metadata ?? {});
        const statusKeys = Object.keys(p?.status ?? {});
        if (
          keys.some((k) => k !== 'metadata' && k !== 'status') ||
          metaKeys.some((k) => k !== 'annotations') ||
          statusKeys.some((k) => k !== 'conditions')
        )
          return status(
            422,
            'Invalid',
            'the stand-in patches metadata.annotations and status.conditions only',
          );
        // Conditions only through the status subresource, merged by type as a strategic merge patch
        // does (a JSON merge patch would replace the whole list, the kubelet's conditions with it).
        if (
          p.status?.conditions !== undefined &&
          (!target[2] || type !== 'application/strategic-merge-patch+json')
        )
          return status(
            422,
            'Invalid',
            'conditions are patched through nodes/status with a strategic merge patch',
          );
        const annotations = { ...node.metadata.annotations };
        for (const [k, v] of Object.entries(p.metadata?.annotations ?? {}))
          if (v === null) delete annotations[k];
          else annotations[k] = String(v);
        const conditions = [...(node.status?.conditions ?? [])];
        for (const c of p.status?.conditions ?? []) {
          const i = conditions.findIndex((x) => x.type === c.type);
          if (i >= 0) conditions[i] = { ...conditions[i]!, ...c };
          else conditions.push(c);
        }
        const patched = { ...node, metadata: { ...node.metadata, annotations } };
        if (conditions.length > 0) patched.status = { ...node.status, conditions };
        reply(200, this.store(patched));
      });
      return;
    }
    if (req.method !== 'GET')
      return status(405, 'MethodNotAllowed', 'the stand-in serves GET and PATCH only');

    const kind = policyKindRequest(url);
    if (kind) {
      this.requests.push({
        verb: kind.verb,
        path: url.pathname,
        resourceVersion: url.searchParams.get('resourceVersion') ?? undefined,
      });
      if (kind.verb === 'get' && this.stalled) {
        this.stalled.add(res);
        return;
      }
      return servePolicyKind(this.objects, kind, url, res);
    }
    const one = /^\/api\/v1\/nodes\/([^/]+)$/.exec(url.pathname);
    if (one) {
      this.requests.push({ verb: 'get' });
      const node = this.nodes(decodeURIComponent(one[1]!));
      return node ? reply(200, node) : status(404, 'NotFound', `nodes "${one[1]}" not found`);
    }
    if (url.pathname !== '/api/v1/nodes') return status(404, 'NotFound', 'the stand-in serves nodes only');

    const selector = url.searchParams.get('fieldSelector') ?? undefined;
    let name: string | undefined;
    if (selector !== undefined) {
      const m = /^metadata\.name=(.+)$/.exec(selector);
      if (!m) return status(400, 'BadRequest', `field selector "${selector}" not supported by the stand-in`);
      name = m[1];
    }
    const rvParam = url.searchParams.get('resourceVersion') ?? undefined;
    const matches = (n: StoredObject): boolean => name === undefined || n.metadata.name === name;

    if (url.searchParams.get('watch') !== 'true') {
      this.requests.push({ verb: 'list', fieldSelector: selector, resourceVersion: rvParam });
      const { resourceVersion, items } = this.objects.list('nodes', matches);
      return reply(200, { apiVersion: 'v1', kind: 'NodeList', metadata: { resourceVersion }, items });
    }

    this.requests.push({ verb: 'watch', fieldSelector: selector, resourceVersion: rvParam });
    this.objects.watch('nodes', matches, rvParam ? Number(rvParam) : undefined, res);
  }
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

/** A test CA and a server certificate for 127.0.0.1 (and `addresses`) signed by it. */
function makePki(dir: string, addresses: string[]): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(dir, [
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-subj',
    '/CN=stand-in-ca',
    '-days',
    '2',
  ]);
  openssl(dir, ['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=kube-apiserver']);
  fs.writeFileSync(
    path.join(dir, 'server.ext'),
    `subjectAltName=${['127.0.0.1', ...addresses].map((a) => `IP:${a}`).join(',')},DNS:localhost\nextendedKeyUsage=serverAuth\n`,
  );
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '2',
    '-extfile',
    'server.ext',
  ]);
}
