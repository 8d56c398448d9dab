import { RLIMIT_NOFILE, getrlimit, raiseSoftRlimit } from '../../lib/libc';

// The daemon's descriptor budget. Every API and CNI connection holds a descriptor; at the limit Node
// can accept nothing (EMFILE) and the daemon falls silent. So at start the soft RLIMIT_NOFILE is raised
// to the hard limit (Node's own start-up usually has done so already; a parent that lowered it again,
// or an embedding, may not), and the connection caps are kept below it with a reserve for what the
// daemon needs itself (netlink sockets, namespace handles, the store, agent streams, a Status call).

/** Descriptors kept free of connections. */
export const FD_RESERVE = 256;

export interface FdLimit {
  soft: number;
  hard: number;
  /** The soft limit before start-up raised it. */
  before: number;
}

export function getFdLimit(): { soft: number; hard: number } {
  return getrlimit(RLIMIT_NOFILE);
}

/** Raises the soft descriptor limit to the hard one; returns both (unchanged when it cannot). */
export function raiseFdLimit(): FdLimit {
  const { soft, hard } = getFdLimit();
  if (soft >= hard) return { soft, hard, before: soft };
  try {
    raiseSoftRlimit(RLIMIT_NOFILE);
  } catch {
    return { soft, hard, before: soft };
  }
  return { ...getFdLimit(), before: soft };
}

/**
 * Connection caps that fit the descriptor limit with FD_RESERVE to spare: the configured caps when they
 * fit, else both scaled down in proportion.
 */
export function fitConnectionCaps(
  limit: number,
  caps: { api: number; cni: number },
): { api: number; cni: number; reduced: boolean } {
  const room = Math.max(2, limit - FD_RESERVE);
  const wanted = caps.api + caps.cni;
  if (wanted <= room) return { ...caps, reduced: false };
  const api = Math.max(1, Math.floor((caps.api * room) / wanted));
  const cni = Math.max(1, Math.floor((caps.cni * room) / wanted));
  return { api, cni, reduced: true };
}

/**
 * Raises the descriptor limit and fits the connection caps of `config` below it. Logs what it did;
 * returns the configuration with the caps the daemon can afford.
 */
export function applyFdBudget<T extends { apiMaxConnections: number; cniMaxConnections: number }>(
  config: T,
  log: { info(o: object, msg: string): void; warn(o: object, msg: string): void },
): T {
  let limit: FdLimit;
  try {
    limit = raiseFdLimit();
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'cannot read the descriptor limit; connection caps unchecked');
    return config;
  }
  if (limit.soft !== limit.before)
    log.info({ from: limit.before, to: limit.soft }, 'raised the descriptor limit to the hard limit');
  const caps = fitConnectionCaps(limit.soft, {
    api: config.apiMaxConnections,
    cni: config.cniMaxConnections,
  });
  if (caps.reduced) {
    log.warn(
      { fdLimit: limit.soft, reserve: FD_RESERVE, apiMaxConnections: caps.api, cniMaxConnections: caps.cni },
      'connection caps lowered to fit the descriptor limit (raise LimitNOFILE to keep the configured ones)',
    );
  }
  return { ...config, apiMaxConnections: caps.api, cniMaxConnections: caps.cni };
}
