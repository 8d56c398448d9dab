import { NftContext } from '../../lib/nftables/libnftables';
import { NfElementWriter } from '../../lib/nftables/nf-elements';
import { NftPolicyTable } from '../../lib/nftables/policy-table';
import type { NftPolicyProgram } from '../../lib/nftables/policy-program';
import type { NetnsHandle } from '../../lib/netns/netns-handle';
import type { PolicyEnforcer } from './policy-agent';

// NetworkPolicy in a DPU made of a namespace: the host's own table (lib/nftables/policy-table.ts) in
// the DPU's namespace, where every port's traffic crosses forward between its representor and the
// rest, as it would cross a SmartNIC's switch. Opened on first use, so that a simulator never sent a
// policy never loads libnftables; a start adopts the table the last run left (no moment of allow-all).

export class NetnsPolicy implements PolicyEnforcer {
  private opened?: { ctx: NftContext; elements: NfElementWriter; table: NftPolicyTable };

  constructor(private readonly dpu: NetnsHandle) {}

  async apply(program: NftPolicyProgram): Promise<void> {
    if (!this.opened) {
      const ctx = NftContext.open(this.dpu);
      const elements = NfElementWriter.open(this.dpu);
      this.opened = { ctx, elements, table: new NftPolicyTable(ctx, elements) };
    }
    await this.opened.table.apply(program);
  }

  async close(): Promise<void> {
    const o = this.opened;
    this.opened = undefined;
    await o?.ctx.close();
    await o?.elements.close();
  }
}
