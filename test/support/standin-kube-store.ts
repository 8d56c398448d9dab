import type { ServerResponse } from 'node:http';

// The stand-in API server's storage (standin-kube-apiserver.ts): objects of every kind under one
// resourceVersion counter, as etcd gives the real one; a history of watch events; lists and watches
// of one collection with a filter; a watch from a version older than the retained history gets an
// ERROR event with a 410 "Expired" Status, as after etcd compaction. Tests can hold the events back
// (a watch that lags behind the writes) and release them in order.

export interface StoredObject {
  metadata: {
    name: string;
    namespace?: string;
    uid: string;
    resourceVersion: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  [field: string]: unknown;
}

interface WatchEvent {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  collection: string;
  object: StoredObject;
}

interface Watcher {
  collection: string;
  matches(obj: StoredObject): boolean;
  res: ServerResponse;
}

export type ObjectFilter = (obj: StoredObject) => boolean;

const all: ObjectFilter = () => true;

export function keyOf(obj: StoredObject): string {
  return obj.metadata.namespace ? `${obj.metadata.namespace}/${obj.metadata.name}` : obj.metadata.name;
}

export class KubeObjectStore {
  private rv = 1000;
  /** Versions at or below this are gone from history: watching from them gets 410. */
  private compactedRv = 0;
  private readonly collections = new Map<string, Map<string, StoredObject>>();
  private readonly history: WatchEvent[] = [];
  private readonly watchers = new Set<Watcher>();
  /** Events written while watches are held back, sent on release. */
  private held?: WatchEvent[];

  get resourceVersion(): number {
    return this.rv;
  }

  get(collection: string, key: string): StoredObject | undefined {
    return this.collections.get(collection)?.get(key);
  }

  /** Stores an object at a new resourceVersion (ADDED, or MODIFIED when its key exists) and tells the watchers. */
  put<T extends StoredObject>(collection: string, obj: T): T {
    const objects = this.collectionOf(collection);
    obj.metadata = { ...obj.metadata, resourceVersion: String(++this.rv) };
    const key = keyOf(obj);
    const type = objects.has(key) ? 'MODIFIED' : 'ADDED';
    objects.set(key, obj);
    this.emit({ rv: this.rv, type, collection, object: obj });
    return obj;
  }

  delete(collection: string, key: string): boolean {
    const objects = this.collectionOf(collection);
    const obj = objects.get(key);
    if (!obj) return false;
    objects.delete(key);
    const object = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++this.rv) } };
    this.emit({ rv: this.rv, type: 'DELETED', collection, object });
    return true;
  }

  list(collection: string, matches: ObjectFilter = all): { resourceVersion: string; items: StoredObject[] } {
    return {
      resourceVersion: String(this.rv),
      items: [...this.collectionOf(collection).values()].filter(matches),
    };
  }

  /** Serves a watch of `collection` on `res` from version `from` (now when undefined). */
  watch(collection: string, matches: ObjectFilter, from: number | undefined, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // Headers at once, as the API server flushes them: a watch with no event yet is still an answer.
    res.flushHeaders();
    const since = from ?? this.rv;
    if (since < this.compactedRv) {
      send(res, {
        type: 'ERROR',
        object: {
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          reason: 'Expired',
          message: `too old resource version: ${since} (${this.compactedRv})`,
          code: 410,
        },
      });
      res.end();
      return;
    }
    const held = new Set(this.held);
    for (const ev of this.history)
      if (ev.rv > since && ev.collection === collection && matches(ev.object) && !held.has(ev))
        send(res, { type: ev.type, object: ev.object });
    const watcher: Watcher = { collection, matches, res };
    this.watchers.add(watcher);
    res.on('close', () => this.watchers.delete(watcher));
  }

  /** Ends every open watch response abruptly, as a dropped connection or an API server restart does. */
  dropWatches(): void {
    for (const w of this.watchers) w.res.socket?.destroy();
    this.watchers.clear();
  }

  /** Forgets all history up to now: a watch resumed from an older version gets 410 Gone. */
  expireHistory(): void {
    this.compactedRv = this.rv;
    this.history.length = 0;
  }

  /**
   * While held, writes are stored and listed but their events reach no open watch (a watch lagging
   * behind); on release the held events are sent in order.
   */
  holdWatchEvents(hold: boolean): void {
    if (hold) {
      this.held ??= [];
      return;
    }
    const held = this.held ?? [];
    this.held = undefined;
    for (const ev of held) this.deliver(ev);
  }

  private collectionOf(collection: string): Map<string, StoredObject> {
    let objects = this.collections.get(collection);
    if (!objects) this.collections.set(collection, (objects = new Map()));
    return objects;
  }

  private emit(ev: WatchEvent): void {
    this.history.push(ev);
    if (this.held) this.held.push(ev);
    else this.deliver(ev);
  }

  private deliver(ev: WatchEvent): void {
    for (const w of this.watchers)
      if (w.collection === ev.collection && w.matches(ev.object))
        send(w.res, { type: ev.type, object: ev.object });
  }
}

function send(res: ServerResponse, ev: { type: string; object: unknown }): void {
  res.write(`${JSON.stringify(ev)}\n`);
}
