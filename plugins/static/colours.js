// Colour scales: categories (the Images-tab palette), numbers (viridis), correlations (-1..+1).

const PALETTE = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf',
];
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

/** Grey: a point of no coloured category, or with no number. */
export const OTHER_COLOUR = '#bdbdbd';

/** The colour of category ``i`` (the palette, then hues spread by the golden angle). */
export function categoryColour(i) {
  if (i < PALETTE.length) return PALETTE[i];
  return `hsl(${(i * 137.508) % 360}, 55%, 50%)`;
}

/** Viridis at ``t`` in [0, 1]. */
export function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** -1 blue, 0 white, +1 red; null grey. */
export function diverging(v) {
  if (v == null || !Number.isFinite(v)) return '#e0e0e0';
  const t = Math.max(-1, Math.min(1, v));
  const a = Math.abs(t);
  const to = t < 0 ? [33, 102, 172] : [178, 24, 43];
  const c = to.map((x) => Math.round(255 + (x - 255) * a));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
