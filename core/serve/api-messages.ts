import type {
  AttachRequest,
  AttachResponse,
  Attachment as ProtoAttachment,
  FabricStatus as ProtoFabricStatus,
  PoolStatus,
  StatusResponse,
  VfSettings,
} from '../../proto/gen/workloadnet/v1/workload';
import type { DpuPortOptions } from '../backend';
import { addressToBytes } from '../../lib/cidr';
import { DEFAULT_NETWORK } from '../config';
import type { AttachCall, Attachment, PoolUsage, ServiceStatus } from '../workload-service';
import type { FabricStatus } from '../fabric-status';

// The API's messages in the core's terms and back: an Attach request, the answer to Attach and Get,
// Status (pools, networks, DPUs, the fabric) and a List's attachments. Their own file because the
// wire's shapes (proto3 defaults, bytes, renamed fields) are a translation of their own, which the
// server (api-server.ts) only applies around each call.

/** An Attach request as the core's call (empty proto3 fields read as unset). */
export function fromAttachRequest(req: AttachRequest): AttachCall {
  return {
    workloadId: req.workloadId,
    netnsPath: req.netns?.netnsPath ?? '',
    ifName: req.netns?.ifName ?? '',
    mtu: req.netns?.mtu || undefined,
    containerId: req.containerId || undefined,
    network: req.network || undefined,
    pod: req.pod,
    dns: req.dns
      ? {
          nameservers: req.dns.nameservers,
          search: req.dns.search,
          options: req.dns.options,
          domain: req.dns.domain || undefined,
        }
      : undefined,
    dpu: req.dpu || undefined,
    dpuPort: fromVfSettings(req.vf),
  };
}

/**
 * The request's VF settings in the core's terms (the fields share their names), unchecked: the core
 * validates them (a link state it does not know included) with the same rules as the CNI network
 * config's, and keeps only the fields that are set. An empty link state is proto3's "unset".
 */
function fromVfSettings(vf: VfSettings | undefined): DpuPortOptions | undefined {
  return vf && { ...vf, linkState: (vf.linkState || undefined) as DpuPortOptions['linkState'] };
}

/** Status in the wire's terms, but for the version the server adds. */
export function toStatusResponse(st: ServiceStatus): Omit<StatusResponse, 'version'> {
  return {
    ready: st.ready,
    reasons: st.reasons,
    backend: st.backend,
    backendDetails: Object.fromEntries(Object.entries(st.backendDetails).map(([k, v]) => [k, String(v)])),
    pools: st.pools.map(toProtoPool),
    poolSource: st.poolSource && {
      ...st.poolSource,
      details: Object.fromEntries(
        Object.entries(st.poolSource.details ?? {}).map(([k, v]) => [k, String(v)]),
      ),
    },
    attachments: st.attachments,
    reconcile: st.reconcile,
    networks: (st.networks ?? []).map((n) => ({
      ...n,
      pools: n.pools.map(toProtoPool),
      backendDetails: Object.fromEntries(Object.entries(n.backendDetails).map(([k, v]) => [k, String(v)])),
    })),
    dpus: (st.dpus ?? []).map((d) => ({
      ...d,
      lastHeartbeatAgeMs: d.lastHeartbeatAgeMs ?? 0,
      sessionId: d.sessionId ?? '',
      peer: d.peer ?? '',
      reason: d.reason ?? '',
    })),
    fabric: st.fabric && toProtoFabric(st.fabric),
    policy: st.policy && {
      ...st.policy,
      deniedIngress: st.policy.denied.ingress,
      deniedEgress: st.policy.denied.egress,
    },
  };
}

export function toAttachResponse(att: Attachment): AttachResponse {
  const dp = att.dataplane;
  return {
    ip: att.ips.map((i) => addressToBytes(i.address)),
    // The workload's interface stays first (ips[].interface is 0, as in the original contract); the
    // host-side one follows, with no sandbox, as CNI results list it.
    interfaces: [
      { name: att.ifName, mac: dp?.mac ?? '', mtu: dp?.mtu ?? att.mtu, sandbox: att.netnsPath },
      ...(dp?.hostIfName ? [{ name: dp.hostIfName, mac: '', mtu: dp.mtu, sandbox: '' }] : []),
    ],
    ips: att.ips.map((i) => ({
      // The routed model programs a host route per address, so the workload holds it as /32 (/128).
      cidr: `${i.address}/${i.family === 4 ? 32 : 128}`,
      gateway: i.gateway,
      interface: 0,
      family: i.family,
    })),
    routes: (dp?.routes ?? []).map((r) => ({ destination: r.destination, gateway: r.gateway ?? '' })),
    dns: att.dns
      ? {
          nameservers: att.dns.nameservers,
          search: att.dns.search,
          options: att.dns.options,
          domain: att.dns.domain ?? '',
        }
      : undefined,
    backend: att.backend,
    backendDetails: Object.fromEntries(Object.entries(dp?.details ?? {}).map(([k, v]) => [k, String(v)])),
    network: att.network ?? DEFAULT_NETWORK,
  };
}

function toProtoPool(p: PoolUsage): PoolStatus {
  return {
    cidr: p.cidr,
    family: p.family,
    size: p.size,
    used: p.used,
    state: p.state ?? 'active',
    source: p.source ?? '',
  };
}

function toProtoFabric(f: FabricStatus): ProtoFabricStatus {
  return {
    mode: f.mode,
    ready: f.ready,
    reasons: f.reasons,
    warnings: f.warnings,
    node: f.node,
    underlay: f.underlay,
    uplink: f.uplink,
    mtu: f.mtu,
    podMtu: f.podMtu,
    vtep: f.vtep,
    source: f.source && {
      kind: f.source.kind,
      ready: f.source.ready,
      connected: f.source.connected,
      reasons: f.source.reasons,
      rejected: f.source.rejected,
    },
    peers: f.peers.map((p) => ({
      ...p,
      withdrawnAt: p.withdrawnAt ?? '',
      endpoints: p.endpoints ?? [],
      seenBy: p.seenBy ?? [],
      probe: p.probe && { ...p.probe, rttMs: p.probe.rttMs ?? 0, medianRttMs: p.probe.medianRttMs ?? 0 },
    })),
    peerCount: f.peerCount,
    routes: f.objects.routes,
    neighbours: f.objects.neighbours,
    fdb: f.objects.fdb,
    repairs: f.repairs,
    lastApply: f.lastApply ?? '',
    endpoints: f.endpoints ?? [],
    borrowed: f.borrowed ?? 0,
    slices: f.slices ?? 0,
    filteredPackets: f.filteredPackets,
    hostPort: f.hostPort,
  };
}

export function toProtoAttachment(att: Attachment): ProtoAttachment {
  return {
    workloadId: att.workloadId,
    ifName: att.ifName,
    netnsPath: att.netnsPath,
    containerId: att.containerId ?? '',
    pod: att.pod
      ? { uid: att.pod.uid ?? '', namespace: att.pod.namespace ?? '', name: att.pod.name ?? '' }
      : undefined,
    result: toAttachResponse(att),
    state: att.state,
    createdAt: att.createdAt,
    network: att.network ?? DEFAULT_NETWORK,
  };
}
