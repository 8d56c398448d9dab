import * as net from 'node:net';
import { Toggle, VfLinkState, type Port } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What makes a port impossible to program (ACK_CODE_INVALID), or one this agent cannot carry
// (ACK_CODE_UNSUPPORTED), decided before anything is touched.

/** Limits the simulator claims in its hello. */
export const SIM_MIN_MTU = 68;
export const SIM_MAX_MTU = 9216;

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

/** Why a port cannot be programmed as described, or undefined when it can. */
export function validatePort(port: Port): string | undefined {
  if (!port.name) return 'port name is empty';
  if (!MAC.test(port.mac)) return `MAC ${JSON.stringify(port.mac)} is not of the form 02:00:00:00:00:01`;
  const first = Number.parseInt(port.mac.slice(0, 2), 16);
  if (first & 1) return `MAC ${port.mac} is a multicast address`;
  if (port.mtu < SIM_MIN_MTU || port.mtu > SIM_MAX_MTU)
    return `MTU ${port.mtu} is outside ${SIM_MIN_MTU}-${SIM_MAX_MTU}`;
  if (port.vlan > 4094) return `VLAN ${port.vlan} is outside 0-4094`;
  if (port.vni > 0xffffff) return `VNI ${port.vni} does not fit in 24 bits`;
  for (const cidr of port.ips) {
    const [addr, len, ...rest] = cidr.split('/');
    const family = net.isIP(addr ?? '');
    const bits = Number(len);
    if (rest.length || !family || !Number.isInteger(bits) || bits < 0 || bits > (family === 4 ? 32 : 128)) {
      return `address ${JSON.stringify(cidr)} is not a CIDR`;
    }
  }
  return undefined;
}

/** What in the port needs a feature this agent does not advertise (a daemon should not send it). */
export function unsupportedFeature(port: Port, features: string[]): string | undefined {
  const has = (f: string): boolean => features.includes(f);
  const q = port.qos;
  if (port.pf !== undefined && !has('pf-select'))
    return 'PF selection (feature "pf-select") is not supported';
  if (!q) return undefined;
  if ((q.maxTxRateMbps || q.minTxRateMbps) && !has('qos-rate'))
    return 'transmit rates (feature "qos-rate") are not supported';
  if (q.spoofCheck !== Toggle.TOGGLE_UNSPECIFIED && !has('qos-spoof-check'))
    return 'spoof check (feature "qos-spoof-check") is not supported';
  if (q.trust !== Toggle.TOGGLE_UNSPECIFIED && !has('qos-trust'))
    return 'trust (feature "qos-trust") is not supported';
  if (q.linkState !== VfLinkState.VF_LINK_STATE_UNSPECIFIED && !has('qos-link-state'))
    return 'VF link state (feature "qos-link-state") is not supported';
  if (q.minTxRateMbps && q.maxTxRateMbps && q.minTxRateMbps > q.maxTxRateMbps)
    return `min_tx_rate ${q.minTxRateMbps} is above max_tx_rate ${q.maxTxRateMbps}`;
  return undefined;
}
