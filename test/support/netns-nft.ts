import { execFileSync } from 'node:child_process';

// nft(8) inside a test-owned namespace: scripts run as given, and counting rules that say which source
// addresses arrived there.

/** Runs an nft script in `ns` and returns what it prints. */
export const nftIn = (ns: string, script: string): string =>
  execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: script, encoding: 'utf8' });

/**
 * Counts echo requests by source address in `ns`'s input hook, from zero (a count of an earlier call
 * is flushed); returns a reader of the counts.
 */
export function countSources(ns: string, sources: string[]): () => Record<string, number> {
  nftIn(
    ns,
    'table ip seen {\n  chain input { type filter hook input priority 0; policy accept; }\n}\n' +
      'flush chain ip seen input\n' +
      sources.map((s) => `add rule ip seen input ip saddr ${s} icmp type echo-request counter\n`).join(''),
  );
  return () => {
    const out = nftIn(ns, 'list chain ip seen input\n');
    return Object.fromEntries(
      sources.map((s) => [
        s,
        Number(new RegExp(`saddr ${s.replace(/\./g, '\\.')} .*packets (\\d+)`).exec(out)?.[1]),
      ]),
    );
  };
}
