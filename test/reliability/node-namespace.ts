import { addNodeUplink, type NetnsSet } from '../support/netns';

// The "node" side of a reliability test: a test-owned namespace in which the daemon runs, shaped like a
// real node (see addNodeUplink).

export function makeNodeNamespace(namespaces: NetnsSet): string {
  const node = namespaces.add().name;
  addNodeUplink(node);
  return node;
}
