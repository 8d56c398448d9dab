// An ipBlock as the prefixes it allows (its cidr minus its excepts), and the one form every address set
// holds: canonical prefixes, sorted by family and address, none overlapping or covering another
// (nftables interval sets refuse overlapping elements).

import { type Cidr, familyBits, formatAddress, parseAddress } from '../../lib/cidr';

/**
 * "address/prefix" with host bits masked off: the API accepts "10.0.0.1/24" for an ipBlock and means
 * 10.0.0.0/24. Undefined for text that is no CIDR, which then allows nothing rather than everything.
 */
export function parseBlockCidr(text: string): Cidr | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const prefixText = text.slice(slash + 1);
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText)) return undefined;
  let addr: { family: 4 | 6; value: bigint };
  try {
    addr = parseAddress(text.slice(0, slash));
  } catch {
    return undefined;
  }
  const prefixLength = Number(prefixText);
  const bits = familyBits(addr.family);
  if (prefixLength > bits) return undefined;
  const hostBits = BigInt(bits - prefixLength);
  const network = (addr.value >> hostBits) << hostBits;
  const text2 = `${formatAddress(addr.family, network)}/${prefixLength}`;
  return { family: addr.family, network, prefixLength, text: text2 };
}

function makeCidr(family: 4 | 6, network: bigint, prefixLength: number): Cidr {
  return { family, network, prefixLength, text: `${formatAddress(family, network)}/${prefixLength}` };
}

/** The single address as a prefix (/32 or /128); undefined for text that is no address. */
export function addressPrefix(ip: string): Cidr | undefined {
  try {
    const { family, value } = parseAddress(ip);
    return makeCidr(family, value, familyBits(family));
  } catch {
    return undefined;
  }
}

/** Whether `outer` covers `inner` (equal counts). */
export function covers(outer: Cidr, inner: Cidr): boolean {
  if (outer.family !== inner.family || outer.prefixLength > inner.prefixLength) return false;
  const hostBits = BigInt(familyBits(outer.family) - outer.prefixLength);
  return inner.network >> hostBits === outer.network >> hostBits;
}

/** `outer` minus the `hole` it strictly covers: the siblings along the path down to the hole. */
function splitAround(outer: Cidr, hole: Cidr): Cidr[] {
  const out: Cidr[] = [];
  const bits = familyBits(outer.family);
  let cur = outer;
  while (cur.prefixLength < hole.prefixLength) {
    const len = cur.prefixLength + 1;
    const half = 1n << BigInt(bits - len);
    const low = makeCidr(cur.family, cur.network, len);
    const high = makeCidr(cur.family, cur.network + half, len);
    const [inside, outside] = covers(low, hole) ? [low, high] : [high, low];
    out.push(outside);
    cur = inside;
  }
  return out;
}

/** The prefixes an ipBlock allows: `cidr` minus each of `except` (excepts of the other family are moot). */
export function ipBlockPrefixes(cidr: string, except: readonly string[] = []): Cidr[] {
  const whole = parseBlockCidr(cidr);
  if (!whole) return [];
  let parts: Cidr[] = [whole];
  for (const text of except) {
    const hole = parseBlockCidr(text);
    if (!hole || hole.family !== whole.family) continue;
    const next: Cidr[] = [];
    for (const part of parts) {
      if (covers(hole, part)) continue;
      if (covers(part, hole)) next.push(...splitAround(part, hole));
      else next.push(part);
    }
    parts = next;
  }
  return parts;
}

function compareCidr(a: Cidr, b: Cidr): number {
  if (a.family !== b.family) return a.family - b.family;
  if (a.network !== b.network) return a.network < b.network ? -1 : 1;
  return a.prefixLength - b.prefixLength;
}

/** Sorted (IPv4 first, then by address), with every prefix another one covers left out. */
export function mergePrefixes(prefixes: readonly Cidr[]): string[] {
  const sorted = [...prefixes].sort(compareCidr);
  const out: string[] = [];
  let last: Cidr | undefined;
  for (const p of sorted) {
    // Kept prefixes are disjoint and sorted, so only the last kept one can cover the next.
    if (last && covers(last, p)) continue;
    out.push(p.text);
    last = p;
  }
  return out;
}
