import { formatAddress } from '../lib/cidr';
import type { Attachment } from '../proto/gen/workloadnet/v1/workload';
import { age } from './output';

// What `workloadnet inspect` prints: one attachment per block, addresses as text, where the dataplane
// put it (the host-side interface on Linux, the agent and port on a DPU), the namespace and the pod.
// --json prints the API's Attachment with the raw `ip` bytes of the original contract turned into text.

/** The 4- or 16-byte addresses of AttachResponse.ip as text ("10.88.0.2", "fd00::2"). */
export function addressText(bytes: Uint8Array): string {
  if (bytes.length !== 4 && bytes.length !== 16) return Buffer.from(bytes).toString('hex');
  const value = Buffer.from(bytes).reduce((v, b) => (v << 8n) | BigInt(b), 0n);
  return formatAddress(bytes.length === 4 ? 4 : 6, value);
}

/** An Attachment for JSON output: the same shape, with `result.ip` as address strings. */
export function attachmentJson(att: Attachment): unknown {
  if (!att.result) return att;
  return { ...att, result: { ...att.result, ip: att.result.ip.map(addressText) } };
}

export function formatInspect(atts: Attachment[], now = Date.now()): string {
  return atts.map((a) => formatOne(a, now)).join('\n');
}

function formatOne(att: Attachment, now: number): string {
  const r = att.result;
  const lines: [string, string][] = [
    ['workload', att.workloadId],
    ['interface', att.ifName],
    ['network', att.network || 'default'],
  ];
  const pod = att.pod;
  if (pod && (pod.namespace || pod.name || pod.uid)) {
    const name = pod.namespace || pod.name ? `${pod.namespace || '-'}/${pod.name || '-'}` : '-';
    lines.push(['pod', pod.uid ? `${name} (uid ${pod.uid})` : name]);
  }
  if (att.containerId) lines.push(['container', att.containerId]);
  lines.push(['netns', att.netnsPath]);
  lines.push(['state', `${att.state}, created ${att.createdAt} (${age(att.createdAt, now)} ago)`]);
  if (r) {
    lines.push(['backend', r.backend || '-']);
    const ips =
      r.ips.length > 0 ? r.ips.map((i) => (i.gateway ? `${i.cidr} gateway ${i.gateway}` : i.cidr)) : [];
    lines.push(['addresses', ips.length > 0 ? ips.join(', ') : r.ip.map(addressText).join(', ') || '-']);
    const workload = r.interfaces.find((i) => i.sandbox !== '');
    if (workload) lines.push(['mac, mtu', `${workload.mac || '-'}, ${workload.mtu}`]);
    lines.push(...placement(r.backend, r.interfaces.find((i) => i.sandbox === '')?.name, r.backendDetails));
    if (r.routes.length > 0) {
      lines.push([
        'routes',
        r.routes.map((x) => (x.gateway ? `${x.destination} via ${x.gateway}` : x.destination)).join(', '),
      ]);
    }
    const dns = r.dns;
    if (
      dns &&
      (dns.nameservers.length > 0 || dns.search.length > 0 || dns.domain || dns.options.length > 0)
    ) {
      const parts = [
        dns.nameservers.length > 0 ? `nameservers ${dns.nameservers.join(' ')}` : '',
        dns.domain ? `domain ${dns.domain}` : '',
        dns.search.length > 0 ? `search ${dns.search.join(' ')}` : '',
        dns.options.length > 0 ? `options ${dns.options.join(' ')}` : '',
      ];
      lines.push(['dns', parts.filter(Boolean).join('; ')]);
    }
  }
  const width = Math.max(...lines.map(([k]) => k.length)) + 2;
  return lines.map(([k, v]) => `${`${k}:`.padEnd(width)}${v}`).join('\n') + '\n';
}

/** Where the attachment lives on the node: a DPU port and its agent, or a host interface. */
function placement(
  backend: string,
  hostIf: string | undefined,
  details: Record<string, string>,
): [string, string][] {
  if (details.dpuPort !== undefined || details.dpuAgentId !== undefined) {
    const parts = [
      `agent ${details.dpuAgentId || '-'}`,
      `port ${details.dpuPort || '-'}`,
      `generation ${details.dpuGeneration || '-'}`,
    ];
    return [
      ['dpu', parts.join(', ')],
      ['host side', hostIf ?? (details.dpuEndpoint || 'none (the agent programs no host interface)')],
    ];
  }
  const out: [string, string][] = [['host side', hostIf ?? '-']];
  if (backend === 'linux' && details.linkGroup) out.push(['link group', details.linkGroup]);
  return out;
}
