// Colour scales: categories (the Images-tab palette), numbers (viridis), correlations (-1..+1);
// and the colour of each point by a metadata column.

// The category colours and the "other" grey: static/palette.json, which the pictures
// (figures.py) read too. view_modules.py writes the file's content in place of the empty object
// below when it serves or joins this module.
const PALETTE_FILE = /* palette.json */ {};
const PALETTE = PALETTE_FILE.categories;
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const NUMERIC_BINS = 32;

/** Grey: a point of no coloured category, or with no number. */
export const OTHER_COLOUR = PALETTE_FILE.other;

/** Every point's colour when nothing colours them: the first category's. */
export const PLAIN_COLOUR = PALETTE[0];

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

/**
 * The colours of ``n`` points by ``column`` (none: one colour): ``colours``, each point's index
 * into them (``bucket``), and what the legend shows (``categories`` [{name, colour}] with
 * ``others``, or the numeric ``range``).
 */
export function colourScheme(column, n) {
  const bucket = new Int32Array(n);
  if (column && column.kind === 'categorical') {
    // The categories in "coloured" (the most frequent, as in the Images-tab picture) get a
    // colour each; the points of any other category, or of none (-1), are "other".
    const coloured = column.coloured || column.categories.map((_, i) => i);
    const colourOf = new Map(coloured.map((c, i) => [c, i]));
    const other = coloured.length;
    const colours = coloured.map((_, i) => categoryColour(i)).concat([OTHER_COLOUR]);
    let others = 0;
    for (let i = 0; i < n; i++) {
      const c = colourOf.get(column.codes[i]);
      bucket[i] = c === undefined ? other : c;
      if (bucket[i] === other) others++;
    }
    const categories = coloured.map((c, i) => ({ name: column.categories[c], colour: colours[i] }));
    return { colours, bucket, categories, others };
  }
  if (column) {
    let lo = Infinity, hi = -Infinity;
    for (const v of column.values) {
      if (v == null || !Number.isFinite(v)) continue;
      if (v < lo) lo = v; if (v > hi) hi = v;
    }
    if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
    const colours = Array.from({ length: NUMERIC_BINS }, (_, i) => viridis(i / (NUMERIC_BINS - 1)));
    colours.push(OTHER_COLOUR); // no number (NaN): grey
    for (let i = 0; i < n; i++) {
      const v = column.values[i];
      bucket[i] = v == null || !Number.isFinite(v) ? NUMERIC_BINS
        : Math.round(((v - lo) / (hi - lo || 1)) * (NUMERIC_BINS - 1));
    }
    return { colours, bucket, range: [lo, hi] };
  }
  return { colours: [PLAIN_COLOUR], bucket };
}

/** The points of each colour (one fillStyle and one path per colour when drawing). */
export function groupByColour(bucket, count) {
  const groups = Array.from({ length: count }, () => []);
  for (let i = 0; i < bucket.length; i++) groups[bucket[i]].push(i);
  return groups.map((g) => Int32Array.from(g));
}
