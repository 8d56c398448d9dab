import { asWorkloadNetError } from '../errors';
import type { FabricControllerOptions } from './fabric-controller-options';
import type { LocalNode, OwnPrefixes } from '../fabric-dataplane';
import type { OwnKeys } from './own-keys';
import type { NodeRecord, PeerSource, TunnelEndpoint } from '../peer-source';

// This node as its peers and its DPUs are told of it: the node as its dataplanes last said (underlay,
// VTEP, DPUs), the record the peer source publishes for it, and what the dataplanes are told it owns.
// Its own file because it is the one part of the fabric controller that writes outward to the peers;
// the apply loop only reads it.
//
// With DPUs (a slice book, core/fabric/slice-book.ts): the record lists the DPUs as endpoints, each with
// its prefixes (its slices and what it borrowed); a dataplane telling of a DPU come or gone gets the
// newcomer a slice, and that, a borrow or a borrowed address released republishes the record and
// applies again, coalesced like peer changes (never on the attach path). Nothing is published or
// applied from the book before it holds the stored cut and attachments: an empty book would tell the
// peers and the DPUs that this node's DPUs own nothing.

export type OwnRecordOptions = Pick<
  FabricControllerOptions,
  'nodeName' | 'bootId' | 'source' | 'dataplanes' | 'slices' | 'podMtu' | 'log'
>;

export interface OwnRecordHooks {
  /** The record or what the node owns may have changed: publish and apply again (coalesced). */
  changed(): void;
  /** Whether the controller was stopped. */
  stopped(): boolean;
}

export class OwnRecord {
  private first?: LocalNode;
  /** Each dataplane's node as it last said (the first one's underlay and VTEP are the node's). */
  private locals: LocalNode[] = [];
  private current?: NodeRecord;
  /** The record the source was last given (JSON), so that only a changed one is published again. */
  private published?: string;
  private sourceStarted = false;
  private following = false;
  /** The slices of the DPUs last listed being given and recorded (the record waits for it). */
  private localWork: Promise<void> = Promise.resolve();

  constructor(
    private readonly opts: OwnRecordOptions,
    private readonly keys: OwnKeys,
    private readonly hooks: OwnRecordHooks,
  ) {}

  /** The first dataplane's node; undefined until the dataplanes are prepared. */
  get local(): LocalNode | undefined {
    return this.first;
  }

  /** The record as last made; undefined until the dataplanes are prepared. */
  get self(): NodeRecord | undefined {
    return this.current;
  }

  /** The dataplanes were prepared: each one's node, in the dataplanes' order. */
  prepared(locals: LocalNode[]): void {
    this.first = locals[0];
    this.locals = locals;
    this.opts.dataplanes.forEach((dp, i) => this.opts.podMtu?.learn(dp, locals[i] as LocalNode));
  }

  /** This node's record as of now, kept as the current one. */
  refresh(): NodeRecord {
    const local = this.first as LocalNode;
    const endpoints = this.endpoints();
    this.current = {
      node: this.opts.nodeName,
      underlay: local.underlay,
      mtu: local.mtu,
      ...(local.vtep ? { vtep: this.keys.vtep(local.vtep) } : {}),
      bootId: this.opts.bootId,
      ...(endpoints ? { endpoints } : {}),
    };
    return this.current;
  }

  /** The node's DPUs, each with its prefixes from the slice book (or as its dataplane gave them). */
  endpoints(): TunnelEndpoint[] | undefined {
    const listed = this.locals.flatMap((l) => l.endpoints ?? []);
    if (listed.length === 0 && !this.locals.some((l) => l.endpoints)) return undefined;
    const book = this.opts.slices;
    const own = book?.ready ? book.own() : undefined;
    return listed.map((e) => ({ ...e, prefixes: own ? [...(own.byEndpoint.get(e.id) ?? [])] : e.prefixes }));
  }

  /**
   * What the dataplanes are told this node owns: the book's cut (when there is one) and where its
   * gateway keys come from. Undefined while the book is not whole, or when neither is known.
   */
  ownForApply(): OwnPrefixes | undefined {
    const book = this.opts.slices;
    if (book && !book.ready) return undefined;
    return this.keys.withKeys(book?.own());
  }

  /** Listens to the dataplanes' DPUs coming and going, and to the book's changes. */
  follow(): void {
    if (this.following) return;
    this.following = true;
    this.opts.slices?.onChange(() => this.hooks.changed());
    this.opts.dataplanes.forEach((dp, i) =>
      dp.onLocalChange?.((local) => {
        this.locals[i] = local;
        this.opts.podMtu?.learn(dp, local);
        if (i === 0) this.first = local;
        this.localChanged();
      }),
    );
    // DPUs the dataplanes already knew at prepare() get their slices too; and the book learns which
    // places are endpoints at all (none yet, on a node whose DPUs do not carry the fabric).
    this.localChanged();
  }

  /**
   * Starts the source with this node's record. With DPUs, the record waits for the whole slice book
   * (a record without its DPUs' slices would withdraw their routes from every peer).
   */
  async startSource(source: PeerSource): Promise<void> {
    const book = this.opts.slices;
    if (book && !book.ready) await book.loaded;
    await this.localWork;
    if (!this.hooks.stopped()) {
      const current = this.refresh();
      this.published = JSON.stringify(current);
      await source.start(current);
    }
    this.sourceStarted = true;
  }

  /** Publishes this node's record again when it changed since the source was last given it. */
  async publishIfChanged(): Promise<void> {
    const source = this.opts.source;
    if (!this.first || !source || !this.sourceStarted) return;
    if (this.opts.slices && !this.opts.slices.ready) return;
    const self = this.refresh();
    const text = JSON.stringify(self);
    if (text === this.published || !source.update) return;
    try {
      await source.update(self);
      this.published = text;
    } catch (err) {
      // Published again at the next change or periodic apply.
      this.opts.log.error({ err: asWorkloadNetError(err).message }, 'cannot publish this node record');
    }
  }

  private localChanged(): void {
    this.localWork = this.localWork.then(() => this.giveSlices());
  }

  /** The DPUs changed: newcomers get slices (once the book is whole), then the record and table follow. */
  private async giveSlices(): Promise<void> {
    const book = this.opts.slices;
    if (book) {
      try {
        await book.setPresent(this.locals.flatMap((l) => (l.endpoints ?? []).map((e) => e.id)));
      } catch (err) {
        this.opts.log.error(
          { err: asWorkloadNetError(err).message },
          'cannot record the slices of new DPUs; they are kept in memory and recorded with the next change',
        );
      }
    }
    this.hooks.changed();
  }
}
