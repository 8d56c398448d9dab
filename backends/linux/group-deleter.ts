// Group-committed link deletion.
//
// Deleting a veth costs ~20 ms in the kernel, nearly all of it the RCU waits that
// unregister_netdevice_many() pays once per call however many devices it removes. So links to be
// deleted are first moved into a "detaching" link group (a cheap RTM_SETLINK), and one RTM_DELLINK by
// group then removes everything gathered there: while one group delete runs, the next batch gathers
// (measurements in docs/benchmarks.md, "Why the code is shaped this way").
//
// The group holds nothing but links on their way out, so a crash in between leaves links that start-up
// reconcile recognises by the group alone and deletes.

import { NetlinkError } from '../../lib/rtnetlink/errors';
import { delLinkGroupRequest } from '../../lib/rtnetlink/link';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';

interface Waiter {
  resolve(): void;
  reject(err: Error): void;
}

export class GroupDeleter {
  private running = false;
  private waiting: Waiter[] = [];

  constructor(
    private readonly sock: NetlinkSocket,
    /** The detaching group: every link in it is deleted by the next flush. */
    readonly group: number,
  ) {}

  /**
   * Resolves once every link that was in the group when flush() was called has been deleted. Rejects
   * with the kernel's error if the group delete failed (the caller then deletes its link by itself).
   */
  flush(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.next();
    });
  }

  private next(): void {
    if (this.running || this.waiting.length === 0) return;
    // Everyone waiting now had moved their link into the group before this delete is sent.
    const batch = this.waiting;
    this.waiting = [];
    this.running = true;
    this.sock.request(delLinkGroupRequest(this.group)).then(
      () => this.settle(batch),
      (err: unknown) => {
        // ENODEV: the group is empty, e.g. the links went with their namespaces. Nothing left to do.
        if (err instanceof NetlinkError && err.notFound) this.settle(batch);
        else this.settle(batch, err instanceof Error ? err : new Error(String(err)));
      },
    );
  }

  private settle(batch: Waiter[], err?: Error): void {
    this.running = false;
    for (const w of batch) {
      if (err) w.reject(err);
      else w.resolve();
    }
    this.next();
  }
}
