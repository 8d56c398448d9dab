// The MAC of our VXLAN device, derived from the node's address so that it is the same after a reboot
// or a recreated device: peers keep their neighbour and FDB entries for us valid across both.

import * as crypto from 'node:crypto';
import { addressBytes, familyOf, AF_INET } from './rtnetlink';

/** `0e:77:a.b.c.d` for an IPv4 address; an IPv6-only node takes 4 bytes of the address's sha256. */
export function vtepMac(nodeAddress: string): string {
  const bytes = addressBytes(nodeAddress);
  const tail =
    familyOf(nodeAddress) === AF_INET
      ? bytes
      : crypto.createHash('sha256').update(bytes).digest().subarray(0, 4);
  // 0x0e: locally administered (bit 1), unicast (bit 0 clear).
  return [0x0e, 0x77, ...tail].map((b) => b.toString(16).padStart(2, '0')).join(':');
}
