import * as net from 'node:net';
import { parseCidr } from '../../lib/cidr';
import { RouteVia, type FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { kindOf } from './fabric-table';

// What makes a FabricObject impossible to program whatever else the DPU holds: the agent answers it
// ACK_CODE_INVALID with the reason and keeps what it had. Checks that depend on other objects (a
// route's peer, a peer's VNI against the local VTEP's) are the dataplane's, reported per object.

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

function badMac(mac: string, what: string): string | undefined {
  if (!MAC.test(mac)) return `${what} MAC ${JSON.stringify(mac)} is not of the form 0e:77:0a:00:00:01`;
  if (Number.parseInt(mac.slice(0, 2), 16) & 1) return `${what} MAC ${mac} is a multicast address`;
  if (mac === '00:00:00:00:00:00') return `${what} MAC is all zeros`;
  return undefined;
}

function badVniPort(vni: number, port: number, what: string): string | undefined {
  if (!Number.isInteger(vni) || vni < 1 || vni > 0xffffff) return `${what} VNI ${vni} is outside 1-16777215`;
  if (!Number.isInteger(port) || port < 1 || port > 0xffff)
    return `${what} UDP port ${port} is outside 1-65535`;
  return undefined;
}

function badAddress(address: string, what: string): string | undefined {
  return net.isIP(address) === 0
    ? `${what} address ${JSON.stringify(address)} is not an IP address`
    : undefined;
}

/** The canonical CIDR, or why the text is not one. */
function cidr(text: string, what: string): string | undefined {
  try {
    const c = parseCidr(text);
    return c.text === text
      ? undefined
      : `${what} ${JSON.stringify(text)} is not in canonical form (${c.text})`;
  } catch (err) {
    return `${what}: ${(err as Error).message}`;
  }
}

/** Why the object cannot be programmed as described, or undefined when it can. */
export function validateFabricObject(o: FabricObject): string | undefined {
  if (!o.name) return 'fabric object name is empty';
  const kind = kindOf(o);
  if (!kind) return `fabric object ${o.name} carries no LocalVtep, LocalPrefix, FabricPeer or PeerRoute`;
  switch (kind) {
    case 'vtep': {
      const v = o.localVtep!;
      if (o.name !== 'vtep') return `a LocalVtep must be named "vtep", not ${JSON.stringify(o.name)}`;
      const mtu = v.mtu < 68 || v.mtu > 9216 ? `LocalVtep MTU ${v.mtu} is outside 68-9216` : undefined;
      return (
        badAddress(v.address, 'LocalVtep') ??
        badMac(v.mac, 'LocalVtep') ??
        badVniPort(v.vni, v.port, 'LocalVtep') ??
        mtu
      );
    }
    case 'prefix': {
      const p = o.localPrefix!.prefix;
      if (o.name !== `prefix/${p}`)
        return `a LocalPrefix of ${p} must be named "prefix/${p}", not ${JSON.stringify(o.name)}`;
      return cidr(p, 'LocalPrefix');
    }
    case 'peer': {
      const p = o.peer!;
      if (!o.name.startsWith('peer/'))
        return `a FabricPeer's name must start with "peer/", not ${JSON.stringify(o.name)}`;
      if (!p.node) return `FabricPeer ${o.name} names no node`;
      return (
        badAddress(p.address, `FabricPeer ${o.name}`) ??
        badMac(p.mac, `FabricPeer ${o.name}`) ??
        badVniPort(p.vni, p.port, `FabricPeer ${o.name}`)
      );
    }
    case 'route': {
      const r = o.peerRoute!;
      if (o.name !== `route/${r.prefix}`)
        return `a PeerRoute of ${r.prefix} must be named "route/${r.prefix}", not ${JSON.stringify(o.name)}`;
      const bad = cidr(r.prefix, 'PeerRoute prefix');
      if (bad) return bad;
      if (!r.peer.startsWith('peer/'))
        return `PeerRoute ${o.name} names peer ${JSON.stringify(r.peer)}, not a "peer/…" object`;
      if (r.via !== RouteVia.ROUTE_VIA_ENCAP && r.via !== RouteVia.ROUTE_VIA_DIRECT)
        return `PeerRoute ${o.name} has no via (ENCAP or DIRECT)`;
      if (r.mtu !== 0 && (r.mtu < 68 || r.mtu > 9216))
        return `PeerRoute ${o.name} MTU ${r.mtu} is outside 68-9216`;
      return undefined;
    }
  }
}
