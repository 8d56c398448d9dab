import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import {
  PolicyRequest,
  type PodPolicy,
  type PolicyRuleView,
  type PolicyStatus,
} from '../proto/gen/workloadnet/v1/workload';
import { EXIT, clientCommand, withClient } from './client-commands';
import { json } from './output';

// `workloadnet policy [NAMESPACE[/POD]]`: what NetworkPolicy enforces for this node's pods (the Policy
// API): per pod, the policies selecting it, whether it is isolated per direction, its rules, the
// address sets they name, where (host or DPU) and since when, and its denied packets; above, the
// summary from Status. Exit code 5 when a pod was named and this node holds no such pod under policy.

interface PolicyOpts {
  socket: string;
  timeout: string;
  json?: boolean;
}

/** "ns/pod" or "ns" → the request; anything else is a usage error. */
export function parsePodFilter(arg: string | undefined): { namespace: string; pod: string } {
  if (!arg) return { namespace: '', pod: '' };
  const [namespace, pod, more] = arg.split('/');
  if (more !== undefined || !namespace || pod === '')
    throw new InvalidArgumentError(`"${arg}" is not NAMESPACE or NAMESPACE/POD`);
  return { namespace, pod: pod ?? '' };
}

export function registerPolicyCommand(program: Command): void {
  clientCommand(program, 'policy', "what NetworkPolicy enforces for this node's pods")
    .argument(
      '[namespace/pod]',
      'one namespace, or one pod (NAMESPACE/POD); default every pod',
      parsePodFilter,
    )
    .option('--json', 'print JSON (the Policy API’s pods, and Status.policy)')
    .addHelpText(
      'after',
      "\nExit code 5 when a pod is named and none of this node's pods under policy is it.\nExamples:\n  workloadnet policy\n  workloadnet policy prod/web-0\n  workloadnet policy prod --json | jq '.pods[] | select(.ingressIsolated) | .pod'",
    )
    .action((filter: { namespace: string; pod: string } | undefined, opts: PolicyOpts) =>
      withClient(opts, async (c) => {
        const req = filter ?? { namespace: '', pod: '' };
        const st = await c.status({ omitFabricPeers: true });
        const res = await c.call(c.raw.policy, PolicyRequest.fromPartial(req));
        process.stdout.write(
          opts.json ? json({ status: st.policy ?? null, pods: res.pods }) : formatPolicy(st.policy, res.pods),
        );
        return req.pod && res.pods.length === 0 ? EXIT.notFound : EXIT.ok;
      }),
    );
}

function rule(r: PolicyRuleView): string {
  const peers = r.anyPeer ? 'any address' : r.sets.length ? r.sets.join(' ') : 'no address';
  const ports = r.anyPort ? 'any port' : r.ports.length ? r.ports.join(' ') : 'no port';
  return `${peers}; ${ports}`;
}

function direction(name: string, isolated: boolean, rules: PolicyRuleView[], denied: number): string[] {
  if (!isolated) return [`  ${name}: not isolated (everything passes)`];
  const lines = [`  ${name}: isolated, ${rules.length} rule(s), ${denied} packet(s) denied`];
  for (const r of rules) lines.push(`    allow ${rule(r)}`);
  if (rules.length === 0) lines.push('    (no rule: everything denied but replies)');
  return lines;
}

export function formatPolicy(st: PolicyStatus | undefined, pods: readonly PodPolicy[]): string {
  const lines: string[] = [];
  if (st)
    lines.push(
      `policy:      ${st.ready ? 'ready' : 'not ready'}, ${st.policies} policies, ${st.podsIsolated} pod(s) here isolated, ${st.rules} rules, ${st.sets} sets`,
      ...st.reasons.map((r) => `  reason:    ${r}`),
      ...st.enforcers.map(
        (e) =>
          `  enforcer:  ${e.backend} on the ${e.where}${e.lastApply ? `, applied ${e.lastApply}` : ''}${e.failure ? `, FAILING: ${e.failure}` : ''}`,
      ),
      ...st.unenforced.map(
        (k) => `  unenforced: ${k} (its backend cannot enforce; dpu.allowUnenforcedPolicy)`,
      ),
    );
  if (pods.length === 0) lines.push('no pod of this node is isolated by a policy');
  for (const p of pods) {
    lines.push(`${p.pod} (${p.attachment}, ${p.ips.join(',')}) on ${p.where} via ${p.hostInterface}`);
    lines.push(
      `  policies: ${p.policies.join(', ') || '-'}${p.appliedAt ? `; in force since ${p.appliedAt}` : ''}`,
    );
    lines.push(...direction('ingress', p.ingressIsolated, p.ingress, p.deniedIngress));
    lines.push(...direction('egress', p.egressIsolated, p.egress, p.deniedEgress));
    for (const s of p.sets) lines.push(`  set ${s.name}: ${s.prefixes.join(' ') || '(empty)'}`);
  }
  return `${lines.join('\n')}\n`;
}
