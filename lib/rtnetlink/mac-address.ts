// MAC addresses between their text form ("aa:bb:cc:dd:ee:ff", as the API and the logs carry them) and
// the six bytes rtnetlink carries. Its own file because links and neighbours both use it, and neither
// owns it.

export function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) {
    throw new TypeError(`not a MAC address: "${mac}"`);
  }
  return Buffer.from(parts.map((p) => Number.parseInt(p, 16)));
}

export function formatMac(bytes: Buffer): string {
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join(':');
}
