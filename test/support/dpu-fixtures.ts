import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AttachmentView, DataplaneResult } from '../../core/backend';
import { testSpec, type TestSpec } from './attach-spec';
import { rejection } from './expect-error';
import type { ErrorCode, WorkloadNetError } from '../../core/errors';
import { DpuBackend, type DpuBackendOptions } from '../../backends/dpu';
import { AckCode, ObjectKind, type Ack, type AgentMessage } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// Shared set-up for the DPU backend tests: a scratch directory per test, a backend listening on a
// socket inside it, attach specs that need no real namespace (the simulator's default dataplane
// touches nothing on the host), and the agent's messages that hand-driven agents send.

export function scratchDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'wnd-'));
}

export function removeDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

export async function startBackend(
  dir: string,
  opts: Partial<DpuBackendOptions> = {},
  prime = true,
): Promise<DpuBackend> {
  const b = new DpuBackend({
    agentSocket: path.join(dir, 'agent.sock'),
    ackTimeoutMs: 3000,
    heartbeatIntervalMs: 200,
    // Heartbeats every 200 ms keep the tests quick to notice a silent agent; the silence allowed is
    // wider than three of them, so that a loaded machine stalling either process for half a second is
    // not taken for a lost agent. A test that gives its own interval gets the backend's default.
    ...(opts.heartbeatIntervalMs === undefined ? { heartbeatTimeoutMs: 2000 } : {}),
    // Attach fails at once without an agent, even right after start-up (the daemon waits after a restart).
    startupAgentWaitMs: 0,
    ...opts,
  });
  await b.start();
  if (prime) await b.reconcile([]);
  return b;
}

export function spec(i: number, over: Partial<TestSpec> = {}): TestSpec {
  const address = `10.90.${Math.floor(i / 250)}.${(i % 250) + 2}`;
  return testSpec(
    `w${i}`,
    { path: `/var/run/netns/unused-${i}`, inode: 0 },
    [{ family: 4, address, gateway: '169.254.1.1' }],
    over,
  );
}

export function view(s: TestSpec, dataplane: DataplaneResult | undefined): AttachmentView {
  return {
    key: s.key,
    workloadId: s.workloadId,
    ifName: s.ifName,
    netnsPath: s.netnsPath,
    netnsInode: s.netnsInode,
    ips: s.ips,
    mtu: s.mtu,
    dataplane,
  };
}

/** Awaits a promise that must fail with a WorkloadNetError of `code`; returns the error. */
export const expectCode = (p: Promise<unknown>, code: ErrorCode): Promise<WorkloadNetError> =>
  rejection(p, code);

/** An agent's "port programmed" answer: an OK ack of `name` at `generation` (with `more`, e.g. its endpoint). */
export function okAck(name: string, generation: number, more: Partial<Ack> = {}): AgentMessage {
  return {
    ack: {
      name,
      generation,
      code: AckCode.ACK_CODE_OK,
      message: '',
      retryable: false,
      kind: ObjectKind.OBJECT_KIND_PORT,
      ...more,
    },
  };
}
