import type { NetnsOpener } from '../../core/netns-opener';
import { InProcessDaemon } from './in-process-daemon';
import { RecordingBackend } from './recording-backend';
import { suiteResource } from './suite-resource';

// An in-process daemon over a recording backend for the tests of a `describe`: by default one for all
// of them (started before, disposed after), or a fresh one for each.

export interface RecordingDaemon {
  readonly backend: RecordingBackend;
  readonly daemon: InProcessDaemon;
}

export interface RecordingDaemonOptions {
  /** A fresh daemon (and backend) for each test, so that none sees what another left. */
  each?: boolean;
  /** What the daemon opens namespaces with: stand-ins, since the recording backend enters none. */
  netns?: NetnsOpener;
}

export function recordingDaemon(opts: RecordingDaemonOptions = {}): RecordingDaemon {
  return suiteResource<RecordingDaemon>(
    async () => {
      const backend = new RecordingBackend();
      return { backend, daemon: await InProcessDaemon.start(backend, {}, { netns: opts.netns }) };
    },
    (made) => made.daemon.dispose(),
    opts,
  );
}
