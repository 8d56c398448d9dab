import { FabricController, type FabricControllerOptions } from '../../core/fabric/fabric-controller';
import { silentLogger } from '../../core/logger';
import { Metrics } from '../../core/metrics';
import { VXLAN_SETTINGS } from './fabric-fixtures';
import { ManualPeerSource, type RecordingFabricDataplane } from './recording-fabric-dataplane';

// A fabric controller on node n1 for the tests without a kernel, made fresh for each test: a peer
// source moved by hand, a dataplane that records its tables, and a clock the test moves, so that
// nothing waits on the withdrawal grace. The controller is stopped after the test.

export const GRACE_MS = 180_000;

export class ControllerRig<D extends RecordingFabricDataplane> {
  source = new ManualPeerSource();
  dp: D;
  clock = 1_000_000;
  metrics = new Metrics();
  private controller: FabricController | undefined;

  constructor(private readonly newDataplane: () => D) {
    this.dp = newDataplane();
  }

  /** A controller over the rig's source, dataplane, metrics and clock, with `over` on top. */
  make(over: Partial<FabricControllerOptions> = {}): FabricController {
    this.controller = new FabricController({
      settings: VXLAN_SETTINGS,
      nodeName: 'n1',
      bootId: 'boot-n1',
      source: this.source,
      dataplanes: [this.dp],
      backends: ['linux'],
      withdrawGraceMs: GRACE_MS,
      log: silentLogger(),
      metrics: this.metrics,
      now: () => this.clock,
      coalesceMs: 20,
      ...over,
    });
    return this.controller;
  }

  reset(): void {
    this.source = new ManualPeerSource();
    this.dp = this.newDataplane();
    this.clock = 1_000_000;
    this.metrics = new Metrics();
  }

  async stop(): Promise<void> {
    await this.controller?.stop();
    this.controller = undefined;
  }
}

/** A ControllerRig reset before each test of the calling `describe`, its controller stopped after it. */
export function controllerRig<D extends RecordingFabricDataplane>(newDataplane: () => D): ControllerRig<D> {
  const rig = new ControllerRig(newDataplane);
  beforeEach(() => rig.reset());
  afterEach(() => rig.stop());
  return rig;
}
