// Intervals (rate limits, silence, ages, how long something took) are measured on this clock and never
// on the wall clock: an NTP step or an operator's `date -s` moves Date.now() by hours, which judged a
// well-behaved agent's heartbeats a flood (one hour back: every heartbeat seemed to come before the
// last) or ended every session at once (one hour forward: every agent seemed silent for an hour), and
// made an age negative, which Status could not serialize. Wall-clock times stay where they go on the
// wire or to a person (a heartbeat's sent_at_unix_ms, an ISO timestamp).

/** Milliseconds since an arbitrary start, only ever moving forward at a steady rate (whole ms). */
export function monotonicMs(): number {
  return Math.floor(performance.now());
}
