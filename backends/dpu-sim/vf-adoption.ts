import type { Link } from '../../lib/rtnetlink';
import type { VfSlot } from './vf-pool';

// A DPU whose agent restarts (its ARM cores, or just the agent process) keeps its NIC running: the VFs
// stay where the host put them, with their ifindexes, and so do the representors. The simulator plays
// that with --keep-vfs: on start it keeps the representors it finds carrying its mark instead of
// deleting them, and a port the daemon sends again is programmed in place on the VF it had. The mark is
// the representor's alias: it names the simulator (its VF pool's tag, as VF names do) and the port the
// VF serves, which is all a restart with no memory of its own needs to give each port its VF back. A
// representor is the handle on both ends: the VF end may sit in a workload's namespace, out of sight,
// but the pair stays linked and deleting the representor deletes it too.

const MARK = 'workloadnet-dpu-sim';
/** IFALIASZ - 1: the longest alias the kernel keeps. */
const ALIAS_MAX_BYTES = 255;

/** One VF kept from an earlier start, waiting for its port. */
export interface AdoptedVf {
  port: string;
  representor: string;
  slot: VfSlot;
}

/**
 * The alias that marks a representor as `tag`'s, serving `port`; undefined when the port's name does
 * not fit (such a VF is not kept across a restart: it is removed as a cold boot removes it).
 */
export function representorMark(tag: string, port: string): string | undefined {
  const alias = `${MARK} ${tag} ${port}`;
  return Buffer.byteLength(alias, 'utf8') <= ALIAS_MAX_BYTES ? alias : undefined;
}

/** The port a representor's alias says it serves, when the mark is `tag`'s. */
export function markedPort(tag: string, alias: string | undefined): string | undefined {
  const head = `${MARK} ${tag} `;
  if (!alias?.startsWith(head)) return undefined;
  return alias.slice(head.length) || undefined;
}

/** The VF a representor stands for, from its name (`rp<pf>v<vf>`). */
export function slotOfRepresentor(name: string): VfSlot | undefined {
  const m = /^rp(\d+)v(\d+)$/.exec(name);
  return m ? { pf: Number(m[1]), vf: Number(m[2]) } : undefined;
}

/** The VF a representor left by an earlier start may be kept as: marked as `tag`'s, named as a VF. */
export function adoptable(tag: string, link: Link): AdoptedVf | undefined {
  const port = markedPort(tag, link.alias);
  const slot = slotOfRepresentor(link.name);
  return port && slot ? { port, representor: link.name, slot } : undefined;
}
