import { InProcessDaemon } from './in-process-daemon';
import { RecordingBackend } from './recording-backend';

// One in-process daemon over a recording backend for all the tests of a `describe`: started before
// them, disposed after them.

export interface RecordingDaemon {
  readonly backend: RecordingBackend;
  readonly daemon: InProcessDaemon;
}

export function recordingDaemon(): RecordingDaemon {
  let current: RecordingDaemon | undefined;
  before(async () => {
    const backend = new RecordingBackend();
    current = { backend, daemon: await InProcessDaemon.start(backend) };
  });
  after(async () => current?.daemon.dispose());
  const now = (): RecordingDaemon => {
    if (!current) throw new Error('no daemon: it is started before the tests');
    return current;
  };
  return {
    get backend() {
      return now().backend;
    },
    get daemon() {
      return now().daemon;
    },
  };
}
