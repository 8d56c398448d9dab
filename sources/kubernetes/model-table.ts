import { isDeepStrictEqual } from 'node:util';
import type { ListWatchHolder } from './list-watch-loop';

// One kind's objects as the policy model holds them, keyed by name or namespace/name, filled by a
// list+watch (list-watch-loop.ts). An object the conversion refuses is kept out of the values and
// its reason kept instead, until it is fixed, deleted or listed away.

export type Converted<V> = { value: V } | { refused: string } | undefined;

export interface ModelTableOptions<T, V> {
  /** The object's key; undefined for an object without a name, which is ignored. */
  keyOf(obj: T): string | undefined;
  /** The model's value; undefined for one the model leaves out (a finished pod). */
  convert(obj: T): Converted<V>;
  /** After the values changed: the key, or undefined after a full list. */
  changed(key: string | undefined): void;
}

export class ModelTable<T, V> implements ListWatchHolder<T> {
  private current = new Map<string, V>();
  private refusals = new Map<string, string>();

  constructor(private readonly opts: ModelTableOptions<T, V>) {}

  get values(): ReadonlyMap<string, V> {
    return this.current;
  }

  /** Why each refused object is left out, by key. */
  get refused(): ReadonlyMap<string, string> {
    return this.refusals;
  }

  replace(items: readonly T[]): void {
    const values = new Map<string, V>();
    const refusals = new Map<string, string>();
    for (const obj of items) {
      const key = this.opts.keyOf(obj);
      if (key === undefined) continue;
      const c = this.opts.convert(obj);
      if (c && 'value' in c) values.set(key, c.value);
      else if (c) refusals.set(key, c.refused);
    }
    this.current = values;
    this.refusals = refusals;
    this.opts.changed(undefined);
  }

  put(obj: T): void {
    const key = this.opts.keyOf(obj);
    if (key === undefined) return;
    const c = this.opts.convert(obj);
    if (c && 'refused' in c) this.refusals.set(key, c.refused);
    else this.refusals.delete(key);
    const before = this.current.get(key);
    if (c && 'value' in c) {
      if (before !== undefined && isDeepStrictEqual(before, c.value)) return;
      this.current.set(key, c.value);
    } else if (!this.current.delete(key)) return;
    this.opts.changed(key);
  }

  remove(obj: T): void {
    const key = this.opts.keyOf(obj);
    if (key === undefined) return;
    this.refusals.delete(key);
    if (this.current.delete(key)) this.opts.changed(key);
  }
}
