// How a host interface is tied to its attachment. The name is derived from the key, so detach and
// reconcile find the link without any stored state; the alias spells the key out for people (and
// for `ip link show group …`); the link group marks every link we own.

import * as crypto from 'node:crypto';
import type { AttachmentView } from '../../core/backend';

export const HOST_LINK_ALIAS_PREFIX = 'workloadnet:';
/** IFALIASZ - 1. */
const MAX_ALIAS_BYTES = 255;

/** Prefix of every host interface name: "wn" + 11 hex digits fits IFNAMSIZ (15 bytes). */
const HOST_LINK_NAME_PREFIX = 'wn';

/** "wn" + the first 11 hex digits of sha1(key): 13 bytes, collisions need ~2^22 links. */
export function hostLinkName(key: string): string {
  return HOST_LINK_NAME_PREFIX + crypto.createHash('sha1').update(key).digest('hex').slice(0, 11);
}

export function hostLinkAlias(key: string): string {
  const alias = HOST_LINK_ALIAS_PREFIX + key;
  // Keys are short in practice; a cut alias is still readable and matching goes by name anyway.
  return Buffer.byteLength(alias) <= MAX_ALIAS_BYTES
    ? alias
    : Buffer.from(alias)
        .subarray(0, MAX_ALIAS_BYTES)
        .toString('utf8')
        .replace(/\uFFFD$/, '');
}

/** The key an alias names, or undefined for an alias we did not write. */
export function keyFromAlias(alias: string | undefined): string | undefined {
  return alias?.startsWith(HOST_LINK_ALIAS_PREFIX) ? alias.slice(HOST_LINK_ALIAS_PREFIX.length) : undefined;
}

/** The host interface name recorded with an attachment at attach time, if any. */
export function recordedHostIfName(att: AttachmentView): string | undefined {
  const v = att.dataplane?.details?.hostIfName;
  return typeof v === 'string' && v !== '' ? v : undefined;
}
