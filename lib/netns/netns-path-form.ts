// What a netns path must look like before anything is opened: present, absolute, normalised for a
// workload, and not a /proc/<pid>/ns/ link of another namespace type. Its own file because these
// checks read only the text of the path, while netns-handle.ts opens and inspects the file it names.

import * as path from 'node:path';
import { NetnsError } from './netns-error';
import { isProcNamespaceLink } from './path-walk-policy';

const MAX_PATH = 4096;

/**
 * The namespace type each /proc/<pid>/ns/<name> link names: procfs fixes the names, so a path of this
 * form says its type before anything is opened (opening another process's namespace link needs ptrace
 * rights over it, and a refusal for those would send the operator to the wrong problem).
 */
const PROC_LINK_KINDS: Record<string, string> = {
  pid: 'PID',
  pid_for_children: 'PID',
  mnt: 'mount',
  uts: 'UTS',
  ipc: 'IPC',
  user: 'user',
  cgroup: 'cgroup',
  time: 'time',
  time_for_children: 'time',
};

export function checkPathForm(netnsPath: string, strict: boolean): void {
  const bad = (message: string): NetnsError => new NetnsError('not-a-netns', String(netnsPath), message);
  if (typeof netnsPath !== 'string' || netnsPath.length === 0) {
    throw bad('netns path is required (e.g. /proc/<pid>/ns/net or /var/run/netns/<name>)');
  }
  if (netnsPath.length > MAX_PATH || netnsPath.includes('\0')) {
    throw bad('netns path is too long or contains a NUL byte');
  }
  if (!path.isAbsolute(netnsPath) || (strict && path.normalize(netnsPath) !== netnsPath)) {
    throw bad(
      `netns path ${JSON.stringify(netnsPath)} must be absolute and normalised (no "..", "." or "//")`,
    );
  }
}

/**
 * Refuses a /proc/<pid>/ns/<name> link of another type by its name, saying which type it is: the link
 * may not even open (another process's needs ptrace rights), and a refusal for that would not say
 * what is wrong.
 */
export function checkProcLinkType(netnsPath: string): void {
  if (!isProcNamespaceLink(netnsPath)) return;
  const kind = PROC_LINK_KINDS[path.basename(netnsPath)];
  if (kind === undefined) return;
  throw new NetnsError(
    'not-a-netns',
    netnsPath,
    `netns path ${netnsPath} is a ${kind} namespace, not a network namespace (use ${path.dirname(netnsPath)}/net)`,
  );
}
