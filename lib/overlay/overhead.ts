// What VXLAN encapsulation adds to a packet. Its own file because both ends of the overlay size their
// MTUs by it: the fabric's pod MTU (core/fabric/pod-mtu.ts) and the routes and device of the host.
// A pod MTU that ignores it is fragmented or, with don't-fragment set, dropped in silence.

/** Bytes VXLAN adds to an inner packet: outer IP (20 or 40) + UDP (8) + VXLAN (8) + inner Ethernet (14). */
export const VXLAN_OVERHEAD = { 4: 50, 6: 70 } as const;
