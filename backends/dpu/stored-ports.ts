import type { AttachSpec, AttachmentView, DpuPortOptions, ReconcileOutcome } from '../../core/backend';
import { validateDpuPort } from '../../core/dpu-port-options';
import { ownString } from '../../lib/own-string';
import type { DesiredState } from './desired-state';
import { decodeDetails } from './details';
import type { WorkloadPlacement } from './host-side';
import { portFieldsFromView } from './port-spec';

// What a stored attachment says of its port, read back at start-up: the port an agent confirmed (its
// generation, agent, endpoint and options) goes back into desired state as it was.

/**
 * Restores every stored port an agent confirmed; returns those with a host endpoint, whose host side
 * the caller still has to look at. A row without a confirmed port is reported missing: an attach cut
 * short (which the core removes, core/reconcile/cut-short.ts) or one made by another backend (which it
 * programs again).
 */
export function restoreStoredPorts(
  atts: readonly AttachmentView[],
  desired: DesiredState,
  outcome: ReconcileOutcome,
): AttachmentView[] {
  const withEndpoint: AttachmentView[] = [];
  for (const att of atts) {
    const d = decodeDetails(att.dataplane);
    if (!att.dataplane || !d || !d.agentId) {
      outcome.missing.push(att.key);
      if (att.dataplane) {
        outcome.warnings.push(
          `${att.key}: no port confirmed by a DPU agent is recorded (an attach cut short, or one made by another backend)`,
        );
      }
      continue;
    }
    const endpoint = d.endpoint
      ? {
          netdev: ownString(d.endpoint),
          mac: ownString(att.dataplane.mac),
          pfIndex: d.pf,
          vfIndex: d.vf,
          pciAddress: ownString(d.pciAddress ?? ''),
          representor: ownString(d.representor ?? ''),
        }
      : undefined;
    desired.restore(
      portFieldsFromView(att, d.mac || undefined, storedOptions(d.portOptions)),
      d.generation,
      ownString(d.agentId),
      endpoint,
      endpoint ? placementOf(att) : undefined,
      ownString(d.bootId),
      d.ifIndex,
    );
    if (d.endpoint) withEndpoint.push(att);
    else outcome.healthy.push(att.key);
  }
  return withEndpoint;
}

/** The options stored with an attachment, or none when absent or not readable. */
function storedOptions(json: string | undefined): DpuPortOptions | undefined {
  if (!json) return undefined;
  try {
    return validateDpuPort(JSON.parse(json) as DpuPortOptions);
  } catch {
    return undefined;
  }
}

/** Where a port's host end belongs, kept with the port: its strings are copies of their own. */
export function placementOf(a: AttachSpec | AttachmentView): WorkloadPlacement {
  const ips = a.ips.map((ip) => ({
    family: ip.family,
    address: ownString(ip.address),
    gateway: ownString(ip.gateway),
  }));
  return {
    netnsPath: ownString(a.netnsPath),
    netnsInode: a.netnsInode,
    ifName: ownString(a.ifName),
    mtu: a.mtu,
    ips,
    ...(a.defaultRoute === false ? { defaultRoute: false, routes: (a.routes ?? []).map(ownString) } : {}),
  };
}
