// What keeps strings for as long as an attachment exists (the DPU backend's desired state, the leak
// sweep's first-seen times) keeps its own copies. Strings decoded from a stored row are often views
// into one larger string (the decoder reads all of a row's strings at once and hands out slices of
// it), and a view keeps all of that alive: ~600 bytes per restored port for a 15-byte name, ~340 bytes
// per row in the leak sweep's map. Strings built by concatenation are pairs of pieces until first
// flattened. A copy made here is one flat string of its own.

/** A flat copy of `s` that shares no memory with the string it came from. */
export function ownString(s: string): string {
  // Joining single characters builds a new sequential string, exactly (unlike a byte round trip, which
  // would replace an unpaired surrogate).
  return s.split('').join('');
}
