// Renders benchmark results as a self-contained SVG bar chart (no charting library: a handful of rects
// and text elements is all a grouped horizontal bar chart needs, and the output stays diffable).

export interface ChartBar {
  label: string;
  value: number;
  /** Highlight workloadnet's own bars. */
  ours: boolean;
}

export interface ChartPanel {
  title: string;
  unit: string;
  bars: ChartBar[];
  /** Smaller is better (latency) or larger is better (rate); shown in the panel title. */
  better: 'lower' | 'higher';
}

const WIDTH = 760;
const LABEL_W = 260;
const BAR_H = 18;
const GAP = 6;
const PANEL_PAD = 34;

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(v: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

export function renderChart(title: string, subtitle: string, panels: ChartPanel[]): string {
  let y = 66;
  const parts: string[] = [];
  for (const p of panels) {
    parts.push(
      `<text x="10" y="${y}" font-size="14" font-weight="bold">${esc(p.title)} (${esc(p.unit)}, ${p.better} is better)</text>`,
    );
    y += 12;
    const max = Math.max(...p.bars.map((b) => (Number.isFinite(b.value) ? b.value : 0)), 1e-9);
    for (const b of p.bars) {
      const w = Number.isFinite(b.value) ? Math.max(1, ((WIDTH - LABEL_W - 80) * b.value) / max) : 0;
      parts.push(
        `<text x="${LABEL_W - 8}" y="${y + BAR_H - 5}" font-size="12" text-anchor="end">${esc(b.label)}</text>`,
        `<rect x="${LABEL_W}" y="${y}" width="${w.toFixed(1)}" height="${BAR_H}" fill="${b.ours ? '#2b7bb9' : '#a0a0a0'}"/>`,
        `<text x="${(LABEL_W + w + 6).toFixed(1)}" y="${y + BAR_H - 5}" font-size="12">${fmt(b.value)}</text>`,
      );
      y += BAR_H + GAP;
    }
    y += PANEL_PAD;
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${y}" viewBox="0 0 ${WIDTH} ${y}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="22" font-size="16" font-weight="bold">${esc(title)}</text>`,
    `<text x="10" y="38" font-size="11" fill="#555">${esc(subtitle)}</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}
