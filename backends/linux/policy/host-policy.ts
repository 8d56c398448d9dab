// NetworkPolicy on the Linux backend: our nftables table in the host namespace (the daemon's own, or
// the one given as hostNetnsPath), where every pod's traffic crosses forward between its veth and the
// rest. The ruleset, its diff and its adoption are lib/nftables's, shared with the DPU simulator; this
// is where the backend's namespace is opened and the libnftables context made in it, on first use, so
// a daemon with policy off never loads libnftables.

import type {
  CompiledPolicy,
  PolicyDataplane,
  PolicyDenials,
  PolicyTouched,
} from '../../../core/policy-dataplane';
import { NftContext } from '../../../lib/nftables/libnftables';
import { NfElementWriter } from '../../../lib/nftables/nf-elements';
import { NftPolicyTable } from '../../../lib/nftables/policy-table';
import { NetnsHandle } from '../../../lib/netns/netns-handle';

interface Opened {
  ctx: NftContext;
  elements: NfElementWriter;
  table: NftPolicyTable;
}

export class HostPolicy implements PolicyDataplane {
  readonly where = 'host';
  private opened?: Promise<Opened>;

  /** `hostNetnsPath`: the namespace facing the pods; absent: the process's own. */
  constructor(private readonly hostNetnsPath: string | undefined) {}

  async apply(program: CompiledPolicy, touched?: PolicyTouched): Promise<void> {
    await (await this.table()).apply(program, touched);
  }

  invalidate(): void {
    void this.opened?.then(
      ({ table }) => table.invalidate(),
      () => undefined,
    );
  }

  async denied(): Promise<ReadonlyMap<string, PolicyDenials>> {
    if (!this.opened) return new Map();
    return (await this.table()).denied();
  }

  async remove(): Promise<void> {
    await (await this.table()).remove();
  }

  /** Frees the libnftables context (the backend stops); our table stays in force. */
  async close(): Promise<void> {
    const opened = this.opened;
    this.opened = undefined;
    const held = await opened?.catch(() => undefined);
    await held?.ctx.close();
    await held?.elements.close();
  }

  private async table(): Promise<NftPolicyTable> {
    if (!this.opened) {
      const opening = this.open();
      this.opened = opening;
      // A failure (libnftables missing, namespace gone) is tried again on the next call.
      opening.catch(() => {
        if (this.opened === opening) this.opened = undefined;
      });
    }
    return (await this.opened).table;
  }

  private async open(): Promise<Opened> {
    // The sockets keep the namespace alive; the handle is needed only to make them.
    const ns = this.hostNetnsPath === undefined ? undefined : await NetnsHandle.open(this.hostNetnsPath);
    try {
      const ctx = NftContext.open(ns);
      let elements: NfElementWriter;
      try {
        elements = NfElementWriter.open(ns);
      } catch (err) {
        await ctx.close();
        throw err;
      }
      return { ctx, elements, table: new NftPolicyTable(ctx, elements) };
    } finally {
      ns?.close();
    }
  }
}
