import type { PeerState, PeerStatus } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What an agent says of its peers: one peer's state, and a PeerStatus that is whole or a delta.

export const peerState = (name: string, reachable = true, txPackets = 0): PeerState => ({
  name,
  reachable,
  offloaded: false,
  txPackets,
  rxPackets: 0,
  lastError: '',
});

export const wholeStatus = (peers: PeerState[]): PeerStatus => ({ peers, delta: false, gone: [] });

export const deltaStatus = (peers: PeerState[], gone: string[] = []): PeerStatus => ({
  peers,
  delta: true,
  gone,
});
