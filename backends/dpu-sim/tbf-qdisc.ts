import {
  NLM_F_CREATE,
  NLM_F_REPLACE,
  attrBytes,
  attrNest,
  attrString,
  attrU32,
  encodeAttributes,
  type NetlinkRequest,
} from '../../lib/rtnetlink';

// A token bucket filter (tbf) as the root qdisc of one interface, over rtnetlink: how the simulator
// enforces a port's max_tx_rate on its representor. Only what tbf needs is encoded (tcmsg, TCA_KIND,
// TCA_OPTIONS with TCA_TBF_PARMS and TCA_TBF_BURST); the kernel computes its rate table itself when the
// rate spec names its link layer.

const RTM_NEWQDISC = 36;
const RTM_DELQDISC = 37;
const TCA_KIND = 1;
const TCA_OPTIONS = 2;
const TCA_TBF_PARMS = 1;
const TCA_TBF_BURST = 6;
const TC_H_ROOT = 0xffffffff;
/** Handle 1:0. */
const ROOT_HANDLE = 0x10000;
const TC_LINKLAYER_ETHERNET = 1;
const TCMSG_LEN = 20;
const TC_TBF_QOPT_LEN = 36;

function tcmsg(ifindex: number, handle: number, parent: number): Buffer {
  const b = Buffer.alloc(TCMSG_LEN);
  // family AF_UNSPEC and padding stay zero.
  b.writeInt32LE(ifindex, 4);
  b.writeUInt32LE(handle >>> 0, 8);
  b.writeUInt32LE(parent >>> 0, 12);
  return b;
}

export interface TbfSpec {
  ifindex: number;
  /** The rate, in Mbit/s. */
  rateMbps: number;
}

/** Bytes per second for a rate in Mbit/s (what tc_ratespec.rate holds, capped to its 32 bits). */
export function bytesPerSecond(mbps: number): number {
  return Math.min(Math.floor((mbps * 1_000_000) / 8), 0xffffffff);
}

/**
 * RTM_NEWQDISC replacing the interface's root qdisc with a tbf at `rateMbps`. The burst holds about
 * 5 ms at the rate (never less than a few full frames), and the queue 50 ms, as `tc` would pick.
 */
export function replaceTbfRequest(spec: TbfSpec): NetlinkRequest {
  const rate = bytesPerSecond(spec.rateMbps);
  const burst = Math.max(Math.floor(rate / 200), 4 * 1514);
  const limit = Math.max(Math.floor(rate / 20), 2 * burst);
  const parms = Buffer.alloc(TC_TBF_QOPT_LEN);
  // struct tc_ratespec rate: cell_log, linklayer, overhead, cell_align, mpu, rate.
  parms.writeUInt8(TC_LINKLAYER_ETHERNET, 1);
  parms.writeUInt32LE(rate, 8);
  // peakrate (12 bytes) stays zero: no peak rate.
  parms.writeUInt32LE(limit, 24);
  // buffer and mtu (in ticks) are derived by the kernel from TCA_TBF_BURST.
  return {
    type: RTM_NEWQDISC,
    flags: NLM_F_CREATE | NLM_F_REPLACE,
    payload: Buffer.concat([
      tcmsg(spec.ifindex, ROOT_HANDLE, TC_H_ROOT),
      encodeAttributes([
        attrString(TCA_KIND, 'tbf'),
        attrNest(TCA_OPTIONS, [attrBytes(TCA_TBF_PARMS, parms), attrU32(TCA_TBF_BURST, burst)]),
      ]),
    ]),
  };
}

/** RTM_DELQDISC of the interface's root qdisc (back to the default); ENOENT/EINVAL when there is none. */
export function deleteRootQdiscRequest(ifindex: number): NetlinkRequest {
  return {
    type: RTM_DELQDISC,
    flags: 0,
    payload: Buffer.concat([tcmsg(ifindex, 0, TC_H_ROOT), encodeAttributes([])]),
  };
}
