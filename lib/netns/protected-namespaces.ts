// The namespaces a workload must never be attached to: the daemon's own and the host's. Its own file
// because finding the host's namespace is a question of its own (PID 1's link may be unreadable, and
// kthreadd then stands in for it), apart from opening and checking the path a workload names.

import * as fs from 'node:fs';

let protectedCache: Map<number, string> | undefined;

/** What the namespace with nsfs inode `inode` is, when it is one a workload must not get; else undefined. */
export function protectedNamespace(inode: number): string | undefined {
  protectedCache ??= protectedNamespaces();
  return protectedCache.get(inode);
}

/**
 * Inodes of namespaces that must never be handed to a workload: our own, PID 1's, and the initial
 * network namespace. Reading PID 1's link needs ptrace rights over it, which a daemon may lack; kernel
 * threads always live in the initial namespace and kthreadd (PID 2 in the host PID namespace) stays
 * readable, so it names the host's namespace when PID 1 does not.
 */
function protectedNamespaces(): Map<number, string> {
  const out = new Map<number, string>();
  const guard = (p: string, what: string): void => {
    try {
      const ino = fs.statSync(p).ino;
      if (!out.has(ino)) out.set(ino, what);
    } catch {
      // Unreadable here; the other entries still protect what they can.
    }
  };
  guard('/proc/self/ns/net', "the daemon's own network namespace");
  guard('/proc/1/ns/net', "the network namespace of PID 1 (the host's)");
  try {
    if (fs.readFileSync('/proc/2/comm', 'utf8').trim() === 'kthreadd') {
      guard('/proc/2/ns/net', "the host's initial network namespace");
    }
  } catch {
    // No kthreadd in this PID namespace (a container): PID 1's entry is all we have.
  }
  return out;
}
