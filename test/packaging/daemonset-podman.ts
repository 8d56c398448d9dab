import { execFile, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';

// Runs the manifest's containers with podman as kubelet would run them on a node, from the manifest
// itself: its commands and arguments, its capabilities, its volumes (host paths under a test directory
// that stands for the node's root; the node's /var/run/netns, where tests make their namespaces, as it
// is), its ConfigMap, and the host network given as a test-owned namespace (`--network ns:PATH`),
// never the machine's own. podman here needs runc (crun does not run on hybrid cgroups) and limits
// below the hard ones (the machine may lack CAP_SYS_RESOURCE): docs/install.md, "Trying the image".

export const ROOT = path.resolve(__dirname, '..', '..', '..');
export const MANIFEST = path.join(ROOT, 'packaging', 'kubernetes', 'workloadnet.yaml');

/** Host paths that are the machine's own in tests: the namespaces tests make live there. */
const SHARED_HOST_PATHS = new Set(['/var/run/netns']);

export interface Manifest {
  pod: IPodSpec;
  configJson: string;
}

export function readManifest(): Manifest {
  const docs = loadAllYaml(fs.readFileSync(MANIFEST, 'utf8')) as Array<{
    kind: string;
    spec?: { template?: { spec?: IPodSpec } };
    data?: Record<string, string>;
  }>;
  const pod = docs.find((d) => d.kind === 'DaemonSet')?.spec?.template?.spec;
  const configJson = docs.find((d) => d.kind === 'ConfigMap')?.data?.['config.json'];
  if (!pod || configJson === undefined) throw new Error(`${MANIFEST}: no DaemonSet pod spec or config.json`);
  return { pod, configJson };
}

export function container(pod: IPodSpec, name: string): IContainer {
  const c = [...(pod.initContainers ?? []), ...pod.containers].find((x) => x.name === name);
  if (!c) throw new Error(`the manifest has no container ${name}`);
  return c;
}

export interface NodeView {
  /** Stands for the node's root: host paths of the manifest are made below it. */
  root: string;
  /** Directory with the files of the ConfigMap (config.json). */
  configDir: string;
  /** The node's network namespace (a test-owned one, by name). */
  netns: string;
  nodeName: string;
  /**
   * The API server kubelet points pods at: its service account files (token, ca.crt, namespace), mounted
   * where kubelet mounts them, and the address and port it gives in KUBERNETES_SERVICE_HOST/PORT.
   * Without it, containers get no service account (as with automountServiceAccountToken: false).
   */
  apiServer?: { serviceAccountDir: string; host: string; port: number };
}

/** Where kubelet mounts a pod's service account token, its CA and its namespace. */
export const SERVICE_ACCOUNT_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';

/** Where a host path of the manifest is in the test: below `root`, or itself when it is shared. */
export function onNode(view: NodeView, hostPath: string): string {
  return SHARED_HOST_PATHS.has(hostPath) ? hostPath : path.join(view.root, hostPath);
}

/** The node-side path of `file` as `c` sees it (through its hostPath volume). */
export function nodePathOf(view: NodeView, pod: IPodSpec, c: IContainer, file: string): string {
  const m = (c.volumeMounts ?? [])
    .filter((x) => file === x.mountPath || file.startsWith(`${x.mountPath}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  const host = pod.volumes?.find((v) => v.name === m?.name)?.hostPath?.path;
  if (!m || !host) throw new Error(`${c.name}: ${file} is on no host path volume`);
  return path.join(onNode(view, host), path.relative(m.mountPath, file));
}

let hardNofile: number | undefined;

/** `podman run` arguments for container `c` of `pod` on `view`, up to and including the image. */
export function podmanRunArgs(view: NodeView, pod: IPodSpec, c: IContainer, image: string): string[] {
  hardNofile ??= Number(execFileSync('sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).trim());
  const nofile = Math.min(hardNofile, 65536);
  const args = ['--runtime', 'runc', '--ulimit', `nofile=${nofile}:${nofile}`, '--ulimit', 'nproc=4096:4096'];
  if (!pod.hostNetwork) throw new Error('the test runs the pod on the node network only');
  args.push('--network', `ns:/var/run/netns/${view.netns}`);
  const sc = c.securityContext;
  if (sc?.privileged) args.push('--privileged');
  if (sc?.runAsUser !== undefined) args.push('--user', String(sc.runAsUser));
  for (const cap of sc?.capabilities?.drop ?? []) args.push('--cap-drop', cap);
  for (const cap of sc?.capabilities?.add ?? []) args.push('--cap-add', cap);
  if (sc?.allowPrivilegeEscalation === false) args.push('--security-opt', 'no-new-privileges');
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') env[e.name] = view.nodeName;
    else throw new Error(`env ${e.name}: the test knows only values and spec.nodeName`);
  }
  for (const [k, v] of Object.entries(env)) args.push('--env', `${k}=${v}`);
  if (view.apiServer && pod.automountServiceAccountToken !== false) {
    // What kubelet gives every container of a pod with a service account (the kubernetes Service's
    // address, in the variables client libraries read for their in-cluster configuration).
    const { host, port, serviceAccountDir } = view.apiServer;
    args.push('--env', `KUBERNETES_SERVICE_HOST=${host}`, '--env', `KUBERNETES_SERVICE_PORT=${port}`);
    args.push('--env', `KUBERNETES_SERVICE_PORT_HTTPS=${port}`);
    args.push('--volume', `${serviceAccountDir}:${SERVICE_ACCOUNT_PATH}:ro`);
  }
  for (const m of c.volumeMounts ?? []) {
    const vol = pod.volumes?.find((v) => v.name === m.name);
    let source: string;
    if (vol?.hostPath) {
      source = onNode(view, vol.hostPath.path);
      fs.mkdirSync(source, { recursive: true });
    } else if (vol?.configMap) {
      source = view.configDir;
    } else if (vol?.secret?.optional) {
      continue;
    } else {
      throw new Error(`volume ${m.name}: the test knows host paths, the ConfigMap and optional Secrets`);
    }
    const opts = [m.readOnly ? 'ro' : 'rw'];
    if (m.mountPropagation === 'HostToContainer') opts.push('rslave');
    else if (m.mountPropagation === 'Bidirectional') opts.push('rshared');
    args.push('--volume', `${source}:${m.mountPath}:${opts.join(',')}`);
  }
  // Kubernetes' command replaces the image's entrypoint, args its cmd; $(VAR) expands from env.
  const expand = (s: string): string =>
    s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, n: string) => env[n] ?? '');
  const [entry, ...cmd] = [...(c.command ?? []), ...(c.args ?? [])].map(expand);
  if (c.command) args.push('--entrypoint', entry ?? '');
  args.push(image);
  if (!c.command && entry !== undefined) args.push(entry);
  args.push(...cmd);
  return args;
}

export type ProbeKind = 'readinessProbe' | 'livenessProbe' | 'startupProbe';

/**
 * A probe of container `c` as kubelet makes it: an HTTP GET of its path on its (named) port, from the
 * node's network (the pod's, with hostNetwork). The status code; 0 when nothing answers.
 */
export function httpProbe(view: NodeView, c: IContainer, which: ProbeKind): Promise<number> {
  const get = c[which]?.httpGet;
  if (!get) throw new Error(`${c.name}: no ${which} with httpGet`);
  const port = c.ports?.find((p) => p.name === get.port)?.containerPort ?? get.port;
  const code = `fetch('http://127.0.0.1:${String(port)}${get.path ?? '/'}').then((r) => process.stdout.write(String(r.status)), () => process.stdout.write('0'))`;
  return new Promise((resolve) =>
    execFile('ip', ['netns', 'exec', view.netns, process.execPath, '-e', code], (_err, stdout) =>
      resolve(Number(stdout) || 0),
    ),
  );
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * `podman run` of container `c` of `pod` on `view`: to completion, then removed (an init container), or,
 * given a name, detached under that name (the pod's long-running container).
 */
export function podmanRun(
  view: NodeView,
  pod: IPodSpec,
  c: IContainer,
  image: string,
  detachedAs?: string,
): Promise<Run> {
  const how = detachedAs === undefined ? ['--rm'] : ['--detach', '--name', detachedAs];
  return podman(['run', ...how, ...podmanRunArgs(view, pod, c, image)]);
}

/** Runs podman with `args`; resolves with its exit code and output whatever the code. */
export function podman(args: string[], timeoutMs = 120_000): Promise<Run> {
  return new Promise((resolve) =>
    execFile(
      'podman',
      args,
      { encoding: 'utf8', timeout: timeoutMs, maxBuffer: 16 << 20 },
      (err, stdout, stderr) =>
        resolve({
          code: err ? (typeof err.code === 'number' ? err.code : -1) : 0,
          stdout,
          stderr,
        }),
    ),
  );
}
