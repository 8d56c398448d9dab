import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

// A node with two networks, as the mixed-network torture and soak drive it: the Linux backend's
// "default" on eth0 and a DPU's "fast" on net1, each workload attached to either.

const execFileP = promisify(execFile);

/** The interfaces a workload is attached on, and the network each one is on. */
export const INTERFACES = [
  { ifName: 'eth0', network: 'default' },
  { ifName: 'net1', network: 'fast' },
] as const;

/** The links of a namespace, by name, sorted. */
export async function linkNames(netns: string): Promise<string[]> {
  const { stdout } = await execFileP('ip', ['-n', netns, '-j', 'link', 'show']);
  return (JSON.parse(stdout || '[]') as Array<{ ifname: string }>).map((l) => l.ifname).sort();
}
