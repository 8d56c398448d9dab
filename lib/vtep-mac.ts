// The MAC of a VXLAN device, derived rather than random so that it is the same after a reboot or a
// recreated device: peers keep their neighbour and FDB entries for it valid across both.
//
// A node's MAC is derived from its name and its underlay address: two nodes with one IPv4 address on
// different underlays (each behind its own NAT, or two clusters' address plans) have different names,
// so different MACs, where a MAC made of the address alone would make one take the other's FDB entry.
// A DPU's VTEP is named the same way, by "<node>/<agent id>" (dpuVtepMac): unique in the cluster, and
// never a node's name (node names have no "/"), so two DPUs of different nodes at one address, or a DPU
// at a node's address, have different MACs too. Without a name the address alone is used: with the
// static peer source, whose files list every MAC by hand (the fabric controller gives no name then).
//
// An upgrade from a build that derived a DPU's MAC from its address alone changes that MAC once (with
// a source that publishes records): the daemon programs the new one on the DPU's VTEP and publishes it
// in its node record (endpoints[].vtep.mac), and every peer takes the MAC the record states, never one
// of its own making, so peers move their FDB and neighbour entries to it at their next apply.

import * as crypto from 'node:crypto';
import { addressBytes, canonicalAddress, familyOf, AF_INET } from './rtnetlink';

/**
 * `0e:` and 5 bytes of sha256(name, address) for a named node (2^40 values: two of 5,000 nodes share
 * one with a chance near 1 in 100,000, and the planner then refuses the newcomer in words). Unnamed:
 * `0e:77:a.b.c.d` for an IPv4 address, `0e:77:` and 4 bytes of the address's sha256 for IPv6.
 */
export function vtepMac(address: string, nodeName?: string): string {
  // 0x0e: locally administered (bit 1), unicast (bit 0 clear).
  if (nodeName !== undefined && nodeName !== '') {
    const digest = crypto
      .createHash('sha256')
      .update(`workloadnet vtep\0${nodeName}\0${canonicalAddress(address)}`)
      .digest();
    return hex([0x0e, ...digest.subarray(0, 5)]);
  }
  const bytes = addressBytes(address);
  const tail =
    familyOf(address) === AF_INET ? bytes : crypto.createHash('sha256').update(bytes).digest().subarray(0, 4);
  return hex([0x0e, 0x77, ...tail]);
}

/**
 * The MAC of a DPU's VTEP: derived from its node's name, its agent's id and its uplink address; from
 * the address alone without a node name.
 */
export function dpuVtepMac(address: string, node: string | undefined, agentId: string): string {
  return node ? vtepMac(address, `${node}/${agentId}`) : vtepMac(address);
}

function hex(bytes: readonly number[]): string {
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}
