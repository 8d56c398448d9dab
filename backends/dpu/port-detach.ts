import type { AttachmentView } from '../../core/backend';
import { asWorkloadNetError, type WorkloadNetError } from '../../core/errors';
import type { Logger } from '../../core/logger';
import type { AgentSync } from './agent-sync';
import type { DesiredState } from './desired-state';
import { decodeDetails } from './details';
import type { HostSide } from './host-side';

// Detach on the DPU backend: the VF goes back to the host first, so that the agent finds it where it
// left it when it reclaims it, then the port is deleted on its agent. A row the agent never answered
// for (an attach cut short) has its marked VF returned from the workload instead. Its own file: the
// backend only wraps it in the port's lock; what is handed back, and on whose word, is decided here.

export interface PortDetachDeps {
  desired: DesiredState;
  sync: AgentSync;
  hostSide: HostSide;
  log: Logger;
}

export async function detachPort(deps: PortDetachDeps, att: AttachmentView): Promise<void> {
  const entry = deps.desired.get(att.key);
  const stored = decodeDetails(att.dataplane);
  // The link moved in goes back under the name it came with; which link that is, is told by its index
  // and the port's MAC alone (host-side.ts), whatever an agent has said since.
  const plumbed = entry?.plumbed;
  const endpoint = plumbed?.netdev || stored?.endpoint || '';
  const agentId = entry?.agentId ?? stored?.agentId ?? '';
  // Hand the netdev back first, so that the agent finds its VF where it left it when it reclaims it.
  let hostError: WorkloadNetError | undefined;
  if (endpoint) {
    try {
      await deps.hostSide.unplumb({
        endpoint,
        mac: entry?.port.mac ?? stored?.mac ?? '',
        ifIndex: plumbed?.linkIndex ?? stored?.ifIndex ?? 0,
        netnsPath: att.netnsPath,
        netnsInode: att.netnsInode,
        ifName: att.ifName,
      });
    } catch (err) {
      hostError = asWorkloadNetError(err);
      deps.log.warn(
        { port: att.key, endpoint, err: hostError.message },
        'could not return the endpoint netdev to the host',
      );
    }
  } else if (!agentId && att.dataplane?.mac) {
    hostError = await returnStranded(deps, att);
  }
  // A row without an agent is an attach cut short before its agent answered: its agent was never
  // recorded, and the snapshot, which does not list the port, removes it.
  if (agentId) await deps.sync.remove(att.key, agentId);
  if (hostError) throw hostError;
}

/**
 * A row without the agent's answer is an attach cut short (core/reconcile/cut-short.ts): the daemon
 * may have ended after the VF was moved into the workload, whose namespace keeps it, and the agent
 * cannot hand that VF out again. Only the VF carrying the port's MAC and our mark goes back.
 */
async function returnStranded(
  deps: PortDetachDeps,
  att: AttachmentView,
): Promise<WorkloadNetError | undefined> {
  try {
    const returned = await deps.hostSide.returnStranded({
      mac: att.dataplane?.mac ?? '',
      netnsPath: att.netnsPath,
      netnsInode: att.netnsInode,
    });
    if (returned)
      deps.log.warn(
        { port: att.key, netns: att.netnsPath, returnedAs: returned },
        'the VF of an attach cut short was left in its workload; returned to the host',
      );
    return undefined;
  } catch (err) {
    const failure = asWorkloadNetError(err);
    deps.log.warn({ port: att.key, err: failure.message }, 'could not return the VF of an attach cut short');
    return failure;
  }
}
