// The prober's transport in the kernel: ICMP echo from the fabric's namespace (lib/icmp-echo-socket.ts),
// one socket per family, opened at the first probe of that family. Answers are read on the threadpool
// only while probes are in flight, so an idle fabric (or one with few peers, between rounds) holds no
// thread; each read waits at most READ_TIMEOUT_MS, so stop() returns within that.

import { IcmpEchoSocket } from '../../../lib/icmp-echo-socket';
import type { Netns } from '../../../lib/netns/netns-handle';
import type { Logger } from '../../../core/logger';
import type { ProbeTarget, ProbeTransport } from './peer-prober';

const READ_TIMEOUT_MS = 250;

export class IcmpProbeTransport implements ProbeTransport {
  private readonly sockets = new Map<4 | 6, IcmpEchoSocket>();
  private readonly reading = new Set<4 | 6>();
  private answer: (family: 4 | 6, seq: number) => void = () => undefined;
  private waiting: () => boolean = () => false;
  private closed = false;
  /** Why a socket could not be opened, said once per family. */
  private readonly failed = new Map<4 | 6, string>();

  constructor(
    private readonly ns: Netns,
    private readonly logger: Logger,
  ) {}

  listen(answer: (family: 4 | 6, seq: number) => void, waiting: () => boolean): void {
    this.answer = answer;
    this.waiting = waiting;
  }

  send(target: ProbeTarget, seq: number): string | undefined {
    const sock = this.socket(target.family);
    if (!sock) return this.failed.get(target.family);
    return sock.send(target.address, seq);
  }

  sent(family: 4 | 6): void {
    if (this.reading.has(family) || this.closed) return;
    const sock = this.sockets.get(family);
    if (!sock) return;
    this.reading.add(family);
    void this.readWhileWaiting(family, sock);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.sockets.values()) await s.close();
    this.sockets.clear();
  }

  private async readWhileWaiting(family: 4 | 6, sock: IcmpEchoSocket): Promise<void> {
    try {
      while (!this.closed && this.waiting()) {
        const reply = await sock.receive();
        if (reply) this.answer(family, reply.seq);
      }
    } catch (err) {
      // The next send starts reading again; a socket that keeps failing shows as lost probes.
      this.logger.warn({ family, err: (err as Error).message }, 'fabric probe read failed');
    } finally {
      this.reading.delete(family);
    }
  }

  private socket(family: 4 | 6): IcmpEchoSocket | undefined {
    const had = this.sockets.get(family);
    if (had || this.closed || this.failed.has(family)) return had;
    try {
      const s = IcmpEchoSocket.openIn(this.ns, family, READ_TIMEOUT_MS);
      this.sockets.set(family, s);
      return s;
    } catch (err) {
      const why = `no raw ICMP socket: ${(err as Error).message}`;
      this.failed.set(family, why);
      this.logger.warn({ family, err: why }, 'fabric probes cannot be sent; peers stay unknown');
      return undefined;
    }
  }
}
