import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import type { AttachmentView, DataplaneResult } from '../../../core/backend';
import { ipJson, type TestNamespace } from '../../support/netns';
import { NetnsDpuRig } from '../../support/netns-dpu-rig';
import { describeRoot } from '../../support/describe-root';
import { startBackend, view } from '../../support/dpu-fixtures';
import { attachTo, type TestSpec } from '../../support/attach-spec';

// A daemon killed during a DPU Attach after the VF was moved into the workload, before the agent's
// answer was recorded: the next start removes the row as cut short (core/reconcile/cut-short.ts), and
// the Detach it runs knows only the row's plan (the port's MAC, no endpoint). A VF outlives its port
// on real hardware and stays in the pod's namespace, where the agent can never hand it out again; the
// simulator, which would delete it with its port, is kept stopped here meanwhile to stand for that.
// Before: the VF stayed in the pod, as its eth0. Now it goes back to the host under the name it came
// with, and only the link carrying both the port's MAC and the daemon's mark is touched.

interface LinkJson {
  ifname: string;
  address?: string;
  ifalias?: string;
}

const linksOf = (netns: string): LinkJson[] => ipJson<LinkJson[]>(netns, ['link', 'show']);

/** The row as the attach wrote it before the agent answered: the plan, without the agent's details. */
function unfinishedView(s: TestSpec, r: DataplaneResult): AttachmentView {
  return view(s, { ifName: r.ifName, mac: r.mac, mtu: r.mtu, routes: r.routes });
}

describeRoot('DPU attach cut short: the VF left in the workload (needs root)', function () {
  this.timeout(60_000);
  const rig = new NetnsDpuRig('wnc-', 'dpu-cut');
  let w1: TestNamespace;

  beforeEach(() => (w1 = rig.workload()));

  /** Attaches w1, then stands for the kill: the agent stopped, the backend gone without a Detach. */
  async function cutShort(): Promise<{ s1: TestSpec; r1: DataplaneResult }> {
    const s1 = rig.workloadSpec(1, w1);
    const r1 = await attachTo(rig.backend!, s1);
    expect(linksOf(w1.name).find((l) => l.ifname === 'eth0')?.address, 'the VF in the workload').to.equal(
      r1.mac,
    );
    rig.sim!.child.kill('SIGSTOP');
    await rig.backend!.stop();
    rig.backend = await startBackend(rig.dir, { hostNetnsPath: rig.node.path, ackTimeoutMs: 500 }, false);
    const outcome = await rig.backend.reconcile([unfinishedView(s1, r1)], { storeIsNew: false });
    expect(outcome.missing, 'no agent answer recorded').to.deep.equal([s1.key]);
    return { s1, r1 };
  }

  it('gives the VF an attach cut short left in a live workload namespace back to the host, under its own name', async () => {
    const { s1, r1 } = await cutShort();
    // What the start-up reconcile does with a row cut short.
    await rig.backend!.detach(unfinishedView(s1, r1));
    expect(
      linksOf(w1.name).filter((l) => l.address === r1.mac),
      'no VF of ours left in the workload',
    ).to.deep.equal([]);
    const back = linksOf(rig.node.name).find((l) => l.address === r1.mac);
    expect(back?.ifname, 'back in the host under the name it came with').to.equal(r1.hostIfName);
    expect(back?.ifalias, 'its mark gone').to.equal(undefined);
  });

  it("touches no link of the workload's own, even one carrying the port's MAC", async () => {
    const { s1, r1 } = await cutShort();
    // The VF gone (its agent deleted it), and a link of the workload's that carries the same MAC.
    execFileSync('ip', ['-n', w1.name, 'link', 'del', 'eth0']);
    execFileSync('ip', ['-n', w1.name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p']);
    execFileSync('ip', ['-n', w1.name, 'link', 'set', 'eth0', 'address', r1.mac]);
    await rig.backend!.detach(unfinishedView(s1, r1));
    expect(linksOf(w1.name).map((l) => l.ifname)).to.include.members(['eth0', 'eth0p']);
  });
});
