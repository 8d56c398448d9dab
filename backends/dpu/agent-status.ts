import type { BackendHealth, DpuAgentStatus, DpuFabricStatus } from '../../core/backend';
import { monotonicMs } from '../../lib/monotonic-clock';
import type { AckWaiter } from './ack-waiter';
import type { AgentLink } from './agent-link';
import type { AgentSync } from './agent-sync';
import type { DesiredState } from './desired-state';

// What Status and the readiness probe say of the DPU backend: each DPU agent of the node (connected,
// silent, gone, or holding ports without having connected since start-up) with its inventory and sync,
// and whether the node can take new ports, which it can while one agent is healthy. With the fabric
// on, a healthy agent that carries it and has not acknowledged its current fabric objects holds the
// node's readiness back: pods placed on it would not reach other nodes yet (a DPU that just connected
// or rebooted gets its whole fabric in its snapshot, and the node is network-ready once it is in).

export interface StatusSources {
  agentSocket: string;
  agentListen: string | undefined;
  desired: DesiredState;
  acks: AckWaiter;
  link: AgentLink;
  sync: AgentSync;
  /** Each agent's part of the fabric, undefined while the fabric is off (dpu-fabric.ts). */
  fabric?(agentId: string): DpuFabricStatus | undefined;
  /**
   * Fabric objects a connected agent that carries the fabric has yet to acknowledge at their current
   * generations (refused ones are not waiting: they are a reason of the fabric, not of readiness).
   */
  fabricWaiting?(agentId: string): { waiting: number; size: number } | undefined;
}

export function dpuHealth(src: StatusSources): BackendHealth {
  const { desired, link, sync: agentSync } = src;
  const reasons: string[] = [];
  const notes: string[] = [];
  const details: Record<string, string | number | boolean> = {
    agentSocket: src.agentSocket,
    ports: desired.size,
    pendingAcks: src.acks.pending,
    agentRemovedPorts: agentSync.agentRemovedPorts,
    refusedEndpointChanges: agentSync.refusedEndpointChanges,
  };
  if (src.agentListen) details.agentListen = src.agentListen;
  if (agentSync.keepUnlisted) details.agentsKeepUnlistedPorts = true;
  if (!agentSync.primed) reasons.push('the start-up reconcile has not run yet');
  const sessions = link.sessions();
  const lost = link.lost();
  const healthy = sessions.filter((s) => s.healthy);
  // An agent that has ports but never connected to this daemon (after a restart) is away as well.
  const neverSeen = desired
    .agents()
    .filter((id) => !link.sessionOf(id) && !link.lostOf(id))
    .sort();
  const away = [
    ...sessions.filter((s) => !s.healthy).map((s) => s.agentId),
    ...lost.map((l) => l.agentId),
    ...neverSeen,
  ].sort();
  details.agents = sessions.length + lost.length + neverSeen.length;
  details.agentsHealthy = healthy.length;
  if (away.length > 0) details.agentsAway = away.join(',');
  const only = sessions.length + lost.length === 1;
  for (const s of sessions) {
    if (only) {
      details.agentId = s.agentId;
      details.bootId = s.bootId;
      details.sessionId = s.id;
      details.agentPeer = s.peer.address;
      details.lastHeartbeatAgeMs = s.heartbeatAgeMs;
      const sync = agentSync.state(s.agentId)?.sync;
      details.synced = sync?.sessionId === s.id && sync.complete;
    }
    if (!s.healthy) notes.push(`DPU agent ${s.agentId} has been silent for ${s.silenceMs} ms`);
  }
  for (const l of lost) {
    if (only) {
      details.agentId = l.agentId;
      details.bootId = l.bootId;
      details.disconnectedAgoMs = monotonicMs() - l.at;
      details.synced = false;
    }
    notes.push(`DPU agent ${l.agentId} disconnected: ${l.reason}`);
  }
  for (const id of neverSeen) notes.push(`DPU agent ${id} holds ports but has not connected yet`);
  if (sessions.length + lost.length === 0) {
    notes.push(`no DPU agent connected on ${src.agentSocket}`);
    details.synced = false;
  }
  if (healthy.length > 0 && only) {
    const st = agentSync.state(healthy[0]?.agentId ?? '');
    if (st?.lastSyncMs !== undefined) details.lastSyncMs = st.lastSyncMs;
  } else {
    const syncs = [...agentSync.allStates()]
      .map((st) => st.lastSyncMs)
      .filter((ms): ms is number => ms !== undefined);
    if (syncs.length > 0) details.lastSyncMs = Math.max(...syncs);
  }
  // The node serves new ports while one agent is healthy; the rest are worth an operator's note.
  if (healthy.length === 0) reasons.push(...notes);
  for (const s of healthy) {
    const f = src.fabricWaiting?.(s.agentId);
    if (f && f.waiting > 0)
      reasons.push(
        `DPU agent ${s.agentId} has not acknowledged its fabric yet (${f.waiting} of ${f.size} objects waiting): its pods would not reach other nodes`,
      );
  }
  const ready = reasons.length === 0;
  return { ready, reasons: ready ? notes : reasons, details, dpus: dpuStatuses(src, neverSeen) };
}

/** Every agent known: connected, gone, or holding ports without having connected since start-up. */
function dpuStatuses(src: StatusSources, neverSeen: string[]): DpuAgentStatus[] {
  const { desired, link, sync: agentSync } = src;
  const out: DpuAgentStatus[] = [];
  const base = (id: string): DpuAgentStatus => {
    const st = agentSync.state(id);
    const inv = st?.inventory;
    const fabric = src.fabric?.(id);
    return {
      ...(fabric ? { fabric } : {}),
      id,
      connected: false,
      healthy: false,
      bootId: '',
      protocolVersion: st?.version ?? 0,
      firmwareVersion: inv?.firmwareVersion ?? '',
      agentVersion: inv?.agentVersion ?? '',
      pfs: (inv?.pfs ?? []).map((pf) => ({
        index: pf.index,
        name: pf.name,
        pciAddress: pf.pciAddress,
        linkState: pf.linkState,
        speedMbps: pf.speedMbps,
        mtu: pf.mtu,
        vfsTotal: pf.vfTotal,
        vfsFree: pf.vfFree,
      })),
      vfsTotal: inv?.vfTotal ?? 0,
      vfsFree: inv?.vfFree ?? 0,
      ports: desired.countOn(id),
      synced: false,
    };
  };
  for (const s of link.sessions()) {
    const sync = agentSync.state(s.agentId)?.sync;
    out.push({
      ...base(s.agentId),
      connected: true,
      healthy: s.healthy,
      bootId: s.bootId,
      lastHeartbeatAgeMs: s.heartbeatAgeMs,
      sessionId: s.id,
      peer: s.peer.address,
      synced: sync?.sessionId === s.id && sync.complete,
      reason: s.healthy ? undefined : `silent for ${s.silenceMs} ms`,
    });
  }
  for (const l of link.lost())
    out.push({ ...base(l.agentId), bootId: l.bootId, reason: `disconnected: ${l.reason}` });
  for (const id of neverSeen) out.push({ ...base(id), reason: 'holds ports but has not connected yet' });
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
