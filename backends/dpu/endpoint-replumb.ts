import type { KeyedMutex } from '../../lib/keyed-mutex';
import type { Logger } from '../../core/logger';
import { inventoryRefusal } from './agent-capabilities';
import type { AgentLink } from './agent-link';
import type { DesiredState } from './desired-state';
import { EndpointRefused, type HostSide } from './host-side';
import { hostPortFirst } from './host-port-first';

// A DPU that reboots takes its VFs with it, and re-creates them in the host namespace when it comes
// back. Once its agent has acked a port of the snapshot at its current generation, that port's endpoint
// sitting in the host namespace instead of its workload is such a VF: it is moved back where the port
// was plumbed, through the same guards as at Attach. This runs as the snapshot's ports are acked (the
// host port first), not after the whole snapshot: behind the ports come the fabric objects, thousands
// of them with a large peer table, and every packet to a workload waits for its VF meanwhile.
// Calls for one agent while a pass runs are served by one more pass after it, never by two at once.

export interface ReplumbContext {
  desired: DesiredState;
  hostSide: HostSide;
  link: AgentLink;
  /** The backend's per-port lock: a re-plumb must not cross an Attach or Detach of the same port. */
  locks: KeyedMutex;
  log: Logger;
}

interface Pass {
  /** Asked for again while it ran: what was acked meanwhile needs one more look. */
  again: boolean;
  done: Promise<void>;
}

/** Per context (one per backend), the pass running for each agent. */
const passes = new WeakMap<ReplumbContext, Map<string, Pass>>();

/**
 * Moves the endpoints of `agentId`'s ports that are back in the host namespace into their workloads.
 * While a pass for the agent runs, a call asks for one more after it and shares its promise.
 */
export function replumbRecreatedEndpoints(ctx: ReplumbContext, agentId: string): Promise<void> {
  let running = passes.get(ctx);
  if (!running) passes.set(ctx, (running = new Map()));
  const byAgent = running;
  const current = byAgent.get(agentId);
  if (current) {
    current.again = true;
    return current.done;
  }
  const pass: Pass = { again: false, done: Promise.resolve() };
  pass.done = (async () => {
    try {
      do {
        pass.again = false;
        await replumbOnce(ctx, agentId);
      } while (pass.again);
    } finally {
      byAgent.delete(agentId);
    }
  })();
  byAgent.set(agentId, pass);
  return pass.done;
}

async function replumbOnce(ctx: ReplumbContext, agentId: string): Promise<void> {
  const { desired, hostSide, link, locks, log } = ctx;
  const entries = hostPortFirst([...desired.entries()], (e) => e.port.name);
  const candidates = entries.filter(
    (e) =>
      e.agentId === agentId &&
      e.placement &&
      e.ack?.ok &&
      e.ack.endpoint?.netdev &&
      e.ack.generation === e.port.generation,
  );
  if (candidates.length === 0) return;
  const inHost = await hostSide.hostLinkNames();
  for (const e of candidates) {
    const endpoint = e.ack?.endpoint?.netdev;
    if (!endpoint || !inHost.has(endpoint)) continue;
    const sess = link.sessionOf(agentId);
    const refusal = sess && e.ack?.endpoint ? inventoryRefusal(sess, e.ack.endpoint) : undefined;
    if (refusal) {
      log.error(
        { port: e.port.name, endpoint, reason: refusal },
        'refused to re-plumb the endpoint the agent reported',
      );
      continue;
    }
    const { name, generation } = e.port;
    await locks.run(name, async () => {
      const cur = desired.get(name);
      // Changed or gone meanwhile: whoever changed it plumbed it.
      if (!cur?.placement || cur.port.generation !== generation) return;
      try {
        const { ifIndex } = await hostSide.plumb({ ...cur.placement, endpoint, mac: cur.port.mac });
        desired.setPlacement(name, cur.placement, { netdev: endpoint, linkIndex: ifIndex });
        log.info({ port: name, endpoint }, 're-plumbed a re-created endpoint into its workload');
      } catch (err) {
        // A refused endpoint (the agent named a host netdev that is no VF of its) is an error worth
        // an operator's eye; the port stays desired, and nothing on the host was touched.
        const refused = err instanceof EndpointRefused;
        log[refused ? 'error' : 'warn'](
          { port: name, endpoint, err: (err as Error).message },
          refused
            ? 'refused to re-plumb the endpoint the agent reported'
            : 'could not re-plumb a re-created endpoint',
        );
      }
    });
  }
}
