// The VXLAN overlay as the project writes it into a kernel, whoever writes it (the Linux fabric on a
// node, the simulator in a DPU's namespace): the entries it holds (entries.ts), the requests that add
// and remove them (requests.ts), the diff of a whole plan against what the kernel holds of ours
// (kernel-diff.ts), the device (vxlan-device.ts) and what encapsulation costs (overhead.ts). Imports
// only lib/, so the simulator may use it. This file is the public surface; import from here.

export {
  CATCH_ALL_METRIC,
  PEER_ROUTE_METRIC,
  describeFdb,
  describeNeighbour,
  describeRoute,
  fdbId,
  fdbKey,
  neighbourId,
  neighbourKey,
  routeId,
  routeKey,
  type OverlayEntries,
  type OverlayFdb,
  type OverlayNeighbour,
  type OverlayRoute,
} from './entries';
export { applyOps, diff, readOurs, type DiffOp, type KernelObjects, type OpFailure } from './kernel-diff';
export { VXLAN_OVERHEAD } from './overhead';
export {
  addRouteRequest,
  deleteFdbRequest,
  deleteNeighbourRequest,
  deleteRouteRequest,
  setFdbRequest,
  setNeighbourRequest,
} from './requests';
export {
  VxlanDeviceError,
  ensureVxlanDevice,
  findVxlanDevice,
  type VxlanDeviceSpec,
  type VxlanOutcome,
} from './vxlan-device';
