// The Linux backend's start-up reconcile: one dump of the host namespace's links against the recorded
// attachments. Orphans (links of ours no attachment accounts for) go; attachments without a complete
// host link are reported missing for the core to repair or release; with a new store, complete links
// are described for adoption instead of being deleted.

import { parseAttachmentKey } from '../../core/attachment-key';
import type {
  AttachmentView,
  ReconcileOptions,
  ReconcileOutcome,
  UnclaimedAttachment,
} from '../../core/backend';
import { NetlinkError } from '../../lib/rtnetlink/errors';
import { AF_INET, AF_INET6 } from '../../lib/rtnetlink/inet';
import { delLinkRequest, listLinks, setLinkRequest, type Link } from '../../lib/rtnetlink/link';
import { listRoutes } from '../../lib/rtnetlink/route';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';
import type { GroupDeleter } from './group-deleter';
import { hostLinkAlias, hostLinkName, keyFromAlias, recordedHostIfName } from './host-link-name';
import type { ResolvedLinuxBackendOptions } from './linux-backend-options';

/** Orphan deletes in flight at once: each costs ~20 ms in the kernel and holds a threadpool thread. */
const RECONCILE_DELETE_CONCURRENCY = 8;

/** The host namespace's long-lived socket and its group deleter. */
export interface HostLinks {
  sock: NetlinkSocket;
  deleter: GroupDeleter;
}

/**
 * One dump of the host namespace's links. Links in our group that no attachment accounts for are
 * deleted; attachments without their host link are reported missing, and so are those whose link
 * lacks its alias: the alias is written last, once both sides are configured, so a link without it
 * is an attach cut short (the core repairs it, which replaces the link). No per-attachment
 * requests, so it stays fast with thousands of attachments.
 */
export async function reconcileHostLinks(
  host: HostLinks,
  atts: AttachmentView[],
  opts: ReconcileOptions,
  backend: ResolvedLinuxBackendOptions,
): Promise<ReconcileOutcome> {
  const outcome: ReconcileOutcome = { orphansRemoved: [], missing: [], healthy: [], warnings: [] };
  const links = await listLinks(host.sock);
  const ours = links.filter((l) => l.group === backend.linkGroup);
  const byName = new Map(ours.map((l) => [l.name, l]));
  const expected = new Set<string>();
  for (const att of atts) {
    const name = recordedHostIfName(att) ?? hostLinkName(att.key);
    expected.add(name);
    const link = byName.get(name);
    if (!link) {
      outcome.missing.push(att.key);
      continue;
    }
    if (link.alias === hostLinkAlias(att.key)) {
      outcome.healthy.push(att.key);
      continue;
    }
    outcome.missing.push(att.key);
    const aliasKey = keyFromAlias(link.alias);
    if (aliasKey !== undefined && !att.key.startsWith(aliasKey)) {
      outcome.warnings.push(`host interface ${name} is labelled for ${aliasKey} but belongs to ${att.key}`);
    }
  }
  let unknown = ours.filter((l) => !expected.has(l.name));
  if (opts.storeIsNew) {
    // A new store beside complete attachments (labelled: the alias is written last) means lost
    // state, not orphans: keep them and say what they are, so the core can adopt them.
    const complete = unknown.filter((l) => keyFromAlias(l.alias) !== undefined);
    outcome.unclaimed = await describeUnclaimed(host, complete, backend.linkGroup);
    unknown = unknown.filter((l) => keyFromAlias(l.alias) === undefined);
  }
  // Links in the detaching group were on their way out when the daemon stopped; orphans join them.
  const orphans = [...links.filter((l) => l.group === backend.detachGroup), ...unknown];
  await deleteOrphans(host, orphans, outcome, backend);
  if (outcome.orphansRemoved.length > 0) {
    backend.logger.info({ removed: outcome.orphansRemoved.length }, 'removed orphan host interfaces');
  }
  return outcome;
}

/** Each link's key (from its alias) and the workload addresses its host routes point at it (one dump). */
async function describeUnclaimed(
  host: HostLinks,
  links: Link[],
  linkGroup: number,
): Promise<UnclaimedAttachment[]> {
  if (links.length === 0) return [];
  const routes = [...(await listRoutes(host.sock, AF_INET)), ...(await listRoutes(host.sock, AF_INET6))];
  return links.map((link) => {
    const addresses = routes
      .filter((r) => r.oif === link.index && /\/(32|128)$/.test(r.destination) && !r.gateway)
      .map((r) => r.destination.replace(/\/(32|128)$/, ''))
      .filter((a) => !a.startsWith('fe80:'));
    return {
      key: keyFromAlias(link.alias) as string,
      addresses,
      mtu: link.mtu,
      dataplane: {
        ifName: parseAttachmentKey(keyFromAlias(link.alias) as string).ifName,
        mac: '',
        mtu: link.mtu,
        hostIfName: link.name,
        routes: [],
        details: { hostIfName: link.name, linkGroup },
      },
    };
  });
}

/**
 * Moves the orphans into the detaching group and deletes them with one request, so that thousands
 * of them take about as long as one; if that fails, they are deleted one by one.
 */
async function deleteOrphans(
  host: HostLinks,
  orphans: Link[],
  outcome: ReconcileOutcome,
  backend: ResolvedLinuxBackendOptions,
): Promise<void> {
  if (orphans.length === 0) return;
  const label = (link: Link): string => `${link.name} (${link.alias ?? 'no alias'})`;
  const moved = await host.sock.batch(
    orphans.map((l) => setLinkRequest({ index: l.index }, { group: backend.detachGroup, up: false })),
  );
  const left: Link[] = [];
  orphans.forEach((link, i) => {
    const o = moved[i];
    if (o?.ok) left.push(link);
    else if (o?.error.notFound) outcome.orphansRemoved.push(label(link));
    else outcome.warnings.push(`could not remove orphan host interface ${label(link)}: ${o?.error.message}`);
  });
  try {
    await host.deleter.flush();
    outcome.orphansRemoved.push(...left.map(label));
    return;
  } catch (err) {
    backend.logger.warn({ err: (err as Error).message }, 'group delete failed; deleting orphans one by one');
  }
  await forEachLimited(left, RECONCILE_DELETE_CONCURRENCY, async (link) => {
    try {
      await host.sock.request(delLinkRequest({ index: link.index }));
      outcome.orphansRemoved.push(label(link));
    } catch (err) {
      if (err instanceof NetlinkError && err.notFound) outcome.orphansRemoved.push(label(link));
      else
        outcome.warnings.push(
          `could not remove orphan host interface ${label(link)}: ${(err as Error).message}`,
        );
    }
  });
}

async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
