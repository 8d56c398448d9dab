import type { SliceBook } from './slice-book';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { AppliedPeersFile } from './applied-peers-file';
import type { FabricDataplane, FabricSettings } from '../fabric-dataplane';
import type { TunnelAddressesNow } from './own-keys';
import type { PeerSource } from '../peer-source';
import type { FabricPodMtu } from './pod-mtu';

// What the fabric controller is built with (core/daemon/container.ts), in one place: the controller
// hands each of its parts (own-record.ts, apply-loop.ts, fabric-view.ts) only the options that part
// reads, so this file is the one they all import, and the controller imports them.

export interface FabricControllerOptions {
  /** What the dataplanes are prepared with; absent: the fabric is off. */
  settings?: FabricSettings;
  nodeName: string;
  bootId: string;
  /** Where peers come from; absent when the mode is off. */
  source?: PeerSource;
  /** The dataplanes of the backends in use that offer one (the Linux backend's). */
  dataplanes: readonly FabricDataplane[];
  /** Names of the backends in use, for the reason when none offers a fabric. */
  backends: readonly string[];
  withdrawGraceMs: number;
  /**
   * Where the last applied table is kept for the next start: peers it lists that the source no longer
   * does then get the withdrawal grace instead of losing their routes at the first apply.
   */
  appliedPeers?: AppliedPeersFile;
  /** Told what each dataplane's node carries, for the networks whose MTU is auto. */
  podMtu?: FabricPodMtu;
  /**
   * The networks whose backend offers the fabric: a configured MTU (0 = auto) above what the fabric
   * carries, and attachments running with one, are warned of.
   */
  networks?: readonly FabricNetwork[];
  /** How the node's ranges are cut among its DPUs, when a backend in use places ports. */
  slices?: SliceBook;
  /**
   * The ranges this node's gateway keys come from (OwnPrefixes.keyRanges): what its peer source
   * announces for it, when no pod gets their first address.
   */
  keyRanges?: () => string[];
  /** This node's tunnel addresses, the keys in place of keyRanges' (own-keys.ts), when it has some. */
  tunnelAddresses?: TunnelAddressesNow;
  /** How often they are looked at for a change (a range added), ms. */
  rangesCheckMs?: number;
  log: Logger;
  metrics?: Metrics;
  /** Monotonic clock (ms) of the withdrawal grace; tests move it by hand. */
  now?: () => number;
  /**
   * Changes of the table within this long are applied once (ms). Short: a burst that comes while an
   * apply runs is applied once after it anyway (one apply at a time).
   */
  coalesceMs?: number;
  /** Period of the full apply (ms). */
  reapplyMs?: number;
  /** Share of the time applies may take when changes keep coming (apply-pacer.ts; default 0.1). */
  applyShare?: number;
  /** Wait before preparing again after prepare failed, or starting the source again (ms). */
  retryMs?: number;
}

/** A network as the MTU warnings see it (core/ipam/network.ts). */
export interface FabricNetwork {
  name: string;
  config: { mtu: number };
  /** What the fabric carries to its pods; undefined before its dataplane is prepared. */
  carried(): number | undefined;
  /** Its live attachments with a larger MTU than the fabric carries to them. */
  aboveFabric(): number;
}

export interface FabricStatusOptions {
  /** The per-peer rows (default true). */
  peers?: boolean;
}
