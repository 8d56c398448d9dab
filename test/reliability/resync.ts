import type { StatusResponse } from '../../proto/gen/workloadnet/v1/workload';
import type { SimState } from '../../backends/dpu-sim/state-file';
import type { DaemonProcess } from '../support/daemon-process';
import type { SimProcess } from '../support/sim-process';

// After a SIGKILL of the daemon, the torture suites go on only once the daemon is back and its DPU has
// taken the snapshot of the daemon's new session: before that, a failed call says nothing about the
// code under test. Which session is the DPU's depends on the daemon's configuration (one backend, or a
// network of several), so the caller says where Status names it.

const RESYNC_MS = 20_000;

/** Waits until the daemon is ready and the simulator has applied a snapshot of its current session. */
export async function resynced(
  d: DaemonProcess,
  s: SimProcess,
  where: string,
  sessionOf: (st: StatusResponse) => string | undefined,
): Promise<SimState> {
  const until = Date.now() + RESYNC_MS;
  for (;;) {
    const st = await d.client.status();
    const state = s.state();
    const sessionId = sessionOf(st);
    if (
      st.ready &&
      state &&
      state.pid === s.child.pid &&
      state.synced &&
      sessionId &&
      state.session.sessionId === sessionId
    )
      return state;
    if (Date.now() > until) {
      const sim = JSON.stringify(state && { pid: state.pid, synced: state.synced, session: state.session });
      throw new Error(
        `${where}: no resync within 20 s: daemon ready=${st.ready} (${st.reasons.join('; ')}) ` +
          `session=${sessionId}; sim ${sim}\nsimulator log:\n${s.stderr.slice(-2000)}\ndaemon log:\n${d.log()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}
