import type { FabricReport } from '../fabric-dataplane';
import type { Peer } from '../peer-source';

// The dataplanes' reports summed for Status, and the report of a mode that programs nothing.

export function filteredPackets(reports: readonly FabricReport[]): { filteredPackets?: number } {
  const counted = reports.filter((r) => r.filteredPackets !== undefined);
  if (counted.length === 0) return {};
  return { filteredPackets: counted.reduce((n, r) => n + (r.filteredPackets ?? 0), 0) };
}

export function sumObjects(reports: readonly FabricReport[]): FabricReport['objects'] {
  const out = { routes: 0, neighbours: 0, fdb: 0 };
  for (const r of reports) {
    out.routes += r.objects.routes;
    out.neighbours += r.objects.neighbours;
    out.fdb += r.objects.fdb;
  }
  return out;
}

export function externalReport(table: readonly Peer[]): FabricReport {
  return {
    ready: true,
    reasons: [],
    peers: table.map((p) => ({ node: p.node, path: 'external', prefixes: p.prefixes })),
    objects: { routes: 0, neighbours: 0, fdb: 0 },
    repairs: 0,
  };
}
