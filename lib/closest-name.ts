// "Did you mean": the known name a mistyped one most likely meant, by edit distance (Levenshtein,
// ignoring case), so that an error can name one option instead of listing all of them.

/**
 * The candidate closest to `word`, when it is close enough to be a typo of it (at most a third of
 * the word's letters differ, and never more than 3); else undefined.
 */
export function closestName(word: string, candidates: Iterable<string>): string | undefined {
  const limit = Math.min(3, Math.max(1, Math.floor(word.length / 3)));
  let best: { name: string; distance: number } | undefined;
  for (const name of candidates) {
    const d = editDistance(word.toLowerCase(), name.toLowerCase());
    if (d <= limit && (!best || d < best.distance)) best = { name, distance: d };
  }
  return best?.name;
}

/**
 * For a dotted option name ("fabric.mdoe", "hostNetns"): the option with the same last part in another
 * section ("hostNetns" given at the top is "linux.hostNetns"), else the closest one by spelling.
 */
export function closestOption(dotted: string, options: readonly string[]): string | undefined {
  const leaf = dotted.split('.').pop() ?? dotted;
  return (
    options.find((o) => o !== dotted && o.split('.').pop() === leaf) ??
    closestName(dotted, options) ??
    closestName(leaf, options)
  );
}

/** Insertions, deletions and substitutions turning `a` into `b`. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}
