import type { KeyedMutex } from '../../lib/keyed-mutex';
import type { Logger } from '../../core/logger';
import { inventoryRefusal } from './agent-capabilities';
import type { AgentLink } from './agent-link';
import type { DesiredPort, DesiredState } from './desired-state';
import { EndpointRefused, type HostSide } from './host-side';
import { hostPortFirst } from './host-port-first';

// A DPU that power-cycles takes its VFs with it, and re-creates them in the host namespace when it
// comes back (one whose agent alone restarted keeps them in their workloads: nothing to do). Once its agent has acked a port of the snapshot at its current generation, that port's endpoint
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

/** Endpoints moved back at once: each move holds a namespace and a netlink socket open. */
const REPLUMB_CONCURRENCY = 4;

/** Per context (one per backend): the look at the host running for each agent, and the moves under way. */
interface Replumbing {
  looks: Map<string, { again: boolean; done: Promise<void> }>;
  /** Ports being moved back now: a later look leaves them to the move under way. */
  moving: Set<string>;
  /** Per agent, the moves under way, whichever look started them: every look's caller waits for them. */
  moves: Map<string, Set<Promise<void>>>;
  /** Moves waiting for a slot (REPLUMB_CONCURRENCY), the host port's first. */
  queue: Array<() => Promise<void>>;
  running: number;
}

const state = new WeakMap<ReplumbContext, Replumbing>();

/**
 * Moves the endpoints of `agentId`'s ports that are back in the host namespace into their workloads.
 * One look at the host per agent at a time: a call while one runs asks for one more after it. The
 * moves it finds run a few at once, and none waits for another look: a pod's VF acked while the host
 * port's thousands of routes are written is moved meanwhile. Resolves once the agent's moves under
 * way ended, those an earlier look started included.
 */
export async function replumbRecreatedEndpoints(ctx: ReplumbContext, agentId: string): Promise<void> {
  let st = state.get(ctx);
  if (!st)
    state.set(ctx, (st = { looks: new Map(), moving: new Set(), moves: new Map(), queue: [], running: 0 }));
  const current = st.looks.get(agentId);
  if (current) {
    current.again = true;
    return current.done;
  }
  const r = st;
  let moves = r.moves.get(agentId);
  if (!moves) r.moves.set(agentId, (moves = new Set()));
  const mine = moves;
  const look = { again: false, done: Promise.resolve() };
  look.done = (async () => {
    try {
      do {
        look.again = false;
        for (const e of await recreated(ctx, agentId, r.moving)) {
          const m = move(ctx, r, agentId, e).finally(() => mine.delete(m));
          mine.add(m);
        }
      } while (look.again);
    } finally {
      r.looks.delete(agentId);
    }
    // Moves an earlier look started count too: a caller waits for the host ends to be back.
    await Promise.all([...mine]);
  })();
  r.looks.set(agentId, look);
  return look.done;
}

/** The agent's acked ports whose endpoint is in the host namespace and not being moved, host port first. */
async function recreated(ctx: ReplumbContext, agentId: string, moving: Set<string>): Promise<DesiredPort[]> {
  const candidates = hostPortFirst([...ctx.desired.entries()], (e) => e.port.name).filter(
    (e) =>
      e.agentId === agentId &&
      e.placement &&
      e.ack?.ok &&
      e.ack.endpoint?.netdev &&
      e.ack.generation === e.port.generation &&
      !moving.has(e.port.name),
  );
  if (candidates.length === 0) return [];
  const inHost = await ctx.hostSide.hostLinkNames();
  return candidates.filter((e) => inHost.has(e.ack?.endpoint?.netdev ?? '') && !moving.has(e.port.name));
}

/** Queues one port's move; resolves when it ended. */
function move(ctx: ReplumbContext, r: Replumbing, agentId: string, e: DesiredPort): Promise<void> {
  r.moving.add(e.port.name);
  return new Promise<void>((resolve) => {
    r.queue.push(async () => {
      try {
        await replumbOne(ctx, agentId, e);
      } finally {
        r.moving.delete(e.port.name);
        resolve();
      }
    });
    drain(r);
  });
}

function drain(r: Replumbing): void {
  while (r.running < REPLUMB_CONCURRENCY) {
    const next = r.queue.shift();
    if (!next) return;
    r.running += 1;
    void next().finally(() => {
      r.running -= 1;
      drain(r);
    });
  }
}

/** Re-plumbs one port's re-created endpoint, under the port's lock; failures are logged, not thrown. */
async function replumbOne(ctx: ReplumbContext, agentId: string, e: DesiredPort): Promise<void> {
  const { desired, hostSide, link, locks, log } = ctx;
  const endpoint = e.ack?.endpoint?.netdev;
  if (!endpoint) return;
  const sess = link.sessionOf(agentId);
  const refusal = sess && e.ack?.endpoint ? inventoryRefusal(sess, e.ack.endpoint) : undefined;
  if (refusal) {
    log.error(
      { port: e.port.name, endpoint, reason: refusal },
      'refused to re-plumb the endpoint the agent reported',
    );
    return;
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
