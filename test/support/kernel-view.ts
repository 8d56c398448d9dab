import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { DEFAULT_CONFIG } from '../../core/config';

// What the kernel says, read with ip(8) from test code: the host links in our link group, the routes
// of the node namespace, and a workload's eth0 addresses.

const execFileP = promisify(execFile);

async function ipJsonAsync<T>(netns: string, args: string[]): Promise<T> {
  const { stdout } = await execFileP('ip', ['-n', netns, '-j', ...args]);
  return JSON.parse(stdout || '[]') as T;
}

export interface HostLink {
  ifname: string;
  ifalias?: string;
}

/** Links of the node namespace in `group`. ip prints `{}` for every link outside the group: drop them. */
export async function hostLinksInGroup(node: string, group: number): Promise<HostLink[]> {
  const links = await ipJsonAsync<Array<Partial<HostLink>>>(node, ['link', 'show', 'group', String(group)]);
  return links.filter((l): l is HostLink => typeof l.ifname === 'string');
}

/** Host links the Linux backend made in the node namespace: those in its default link group. */
export function linuxHostLinks(node: string): Promise<HostLink[]> {
  return hostLinksInGroup(node, DEFAULT_CONFIG.linux.linkGroup);
}

export interface RouteEntry {
  dst: string;
  dev?: string;
}

export async function routes(netns: string): Promise<RouteEntry[]> {
  return ipJsonAsync<RouteEntry[]>(netns, ['route', 'show']);
}

/** IPv4 addresses on `dev` inside `netns` ("10.0.0.5/32"), or undefined when there is no such link. */
export async function ipv4Addresses(netns: string, dev: string): Promise<string[] | undefined> {
  const links = await ipJsonAsync<
    Array<{ ifname: string; addr_info?: Array<{ family: string; local: string; prefixlen: number }> }>
  >(netns, ['addr', 'show']);
  const link = links.find((l) => l.ifname === dev);
  if (!link) return undefined;
  return (link.addr_info ?? []).filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`);
}
