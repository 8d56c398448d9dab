import type { Store } from '../store/store';

// A new store cannot vouch that a port its DPU agent holds and it does not list is unwanted (the state
// may have been lost while workloads ran), so the agent's snapshots keep such ports. That doubt ends
// with the store's first full sync with that agent: from then on every port the agent holds beyond the
// snapshot is one this store removed (a Delete the agent acked and then lost, say) or never finished,
// and keeping it would leave a port live with an address the pool hands out again. The record is
// durable, so a restart neither forgets an adoption nor takes one for granted.

/** The store's record of the DPU agents it has finished a first full sync with. */
export interface AgentAdoption {
  /** Whether snapshots to this agent still keep the ports they do not list. */
  keepsUnlisted(agentId: string): boolean;
  /** Records, durably, that a first full sync with the agent finished. */
  record(agentId: string): Promise<void>;
}

/**
 * The record kept in the store. A store older than the record (and not new) was trusted with every
 * agent's ports: nothing is kept for any.
 */
export function storeAdoption(store: Store): AgentAdoption {
  return {
    keepsUnlisted: (agentId) => {
      const adopted = store.adoptedAgents();
      return adopted !== 'all' && !adopted.has(agentId);
    },
    record: (agentId) => store.recordAdoptedAgent(agentId),
  };
}
