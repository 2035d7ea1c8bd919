// The data: where runs and their views come from, and the embeddings decoded for drawing.
//
// A source is {runs(): [{name, time, failed, has_data, ended}], view(name): view, table():
// {runs: [row]} (the runs table's rows; null on a page without them), live (whether the
// table is fetched again from a server),
// compare(a, b, key, at, keyB)} (at: the step cursor's step, each run then at its newest
// snapshot at or before it, the newest without it; keyB: B's tag, A's ``key`` when not given).
// In TensorBoard it fetches the plugin's routes ./runs, ./view?run=... and
// ./compare?a=&b=&key=[&key_b=][&at=] (relative to data/plugin/learnscope/); on a standalone
// page it reads the JSON script element "learnscope-data", {"runs": [{"name", "view"}],
// "compare": {"a", "b", "keys": {key: {"held", "from", "pairs", "note"}}, "messages"}}, the
// comparison being optional (learnscope export --compare [--tags]): per key the comparisons
// the page holds, in cursor order, and the first cursor step that shows each
// (learnscope.plugins.views.compare_steps).

import { shownIndex } from './cursor.js';

let HALF_TABLE = null;

function halfTable() {
  if (HALF_TABLE) return HALF_TABLE;
  HALF_TABLE = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    let v;
    if (exp === 0) v = frac * 2 ** -24;
    else if (exp === 31) v = frac ? NaN : Infinity;
    else v = (1 + frac / 1024) * 2 ** (exp - 15);
    HALF_TABLE[h] = sign * v;
  }
  return HALF_TABLE;
}

/** Decode base64 little-endian float16 values into a Float32Array. */
export function decodeHalf(text) {
  const bytes = base64Bytes(text);
  const table = halfTable();
  const out = new Float32Array(bytes.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
  return out;
}

/** Decode base64 little-endian float32 values into a Float32Array. */
export function decodeFloat32(text) {
  const bytes = base64Bytes(text);
  return new Float32Array(bytes.buffer, 0, bytes.length >> 2);
}

/** The bytes of base64 ``text`` (a plain loop: ``Uint8Array.from`` with a map is ~10x slower). */
function base64Bytes(text) {
  const chars = atob(text);
  const bytes = new Uint8Array(chars.length);
  for (let i = 0; i < chars.length; i++) bytes[i] = chars.charCodeAt(i);
  return bytes;
}

/** An embedding of the view with its snapshots decoded (frames) and the bounds drawn. */
export function prepareEmbedding(e) {
  const frames = e.xy.map(decodeHalf);
  if (e.frame) return { ...e, frames, bounds: e.frame.slice() };
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const f of frames) {
    for (let i = 0; i < f.length; i += 2) {
      const x = f[i], y = f[i + 1];
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
    }
  }
  if (!Number.isFinite(x0)) { x0 = -1; x1 = 1; y0 = -1; y1 = 1; }
  const padX = (x1 - x0 || 1) * 0.05, padY = (y1 - y0 || 1) * 0.05;
  return { ...e, frames, bounds: [x0 - padX, x1 + padX, y0 - padY, y1 + padY] };
}

/** Runs as {name, time} (time: when the run started; a bare name started at 0). */
export function runList(runs) {
  return runs.map((r) => (typeof r === 'string' ? { name: r, time: 0 } : r));
}

/** The run that started last (the last of equals), passing over runs that failed without
 * writing any data (``failed`` and ``has_data`` false) while another run is there. */
export function newestRun(runs) {
  const shown = runs.filter((r) => !(r.failed && r.has_data === false));
  const choices = shown.length ? shown : runs;
  let newest = choices[0];
  for (const r of choices) if ((r.time || 0) >= (newest.time || 0)) newest = r;
  return newest;
}

/** The learnscope plugin's routes, relative to the page TensorBoard loads the tab in. */
export function serverSource() {
  const json = async (url) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
    return response.json();
  };
  return {
    runs: () => json('./runs'),
    view: (run) => json('./view?' + new URLSearchParams({ run })),
    table: () => json('./table'),
    live: true,
    pair: null, // no comparison to open first
    compare: (a, b, key, at, keyB) => {
      const query = { a, b, key };
      if (keyB && keyB !== key) query.key_b = keyB;
      if (at != null) query.at = at;
      return json('./compare?' + new URLSearchParams(query));
    },
  };
}

/** What a page without the comparison of ``a``'s ``key`` and ``b``'s ``keyB`` says instead. */
export function missingComparison(a, b, key, why, keyB = key) {
  const side = (run, tag) => ({ run, key: tag, keys: [], step: null, steps: [], points: 0 });
  return { format: 'learnscope-compare/1', key, k: 10, a: side(a, key), b: side(b, keyB), shared: 0,
    compared: 0, ids: [], xy_a: null, xy_b: null, frame: null, overlap: null, histogram: null,
    mean_overlap: null, chance: null, differ: [], columns: [], messages: [why], notes: [] };
}

/** ``words`` as one command line for a POSIX shell, each word quoted when it needs to be, as
 * learnscope quotes every command it prints (learnscope/shell.py, Python's shlex.quote). */
export function shellCommand(...words) {
  const quote = (word) => (/^[\w@%+=:,./-]+$/.test(word) ? word :
    `'${word.replace(/'/g, `'"'"'`)}'`);
  return words.map((word) => quote(String(word))).join(' ');
}

/** The views inline in the page's JSON script element ``id``, or null without one. */
export function inlineSource(id) {
  const element = document.getElementById(id);
  if (!element) return null;
  const data = JSON.parse(element.textContent);
  const byName = new Map(data.runs.map((r) => [r.name, r.view]));
  const held = data.compare || null;
  const comparisons = held ? Object.values(held.keys) : []; // per key: {held, from, pairs, note}
  for (const c of comparisons) for (const one of c.held) one.held_note = c.note || null;
  const first = comparisons.length ? comparisons[0].held[0] : null;
  return {
    runs: async () => data.runs.map((r) => ({ name: r.name, time: (r.view && r.view.time) || 0,
      failed: (r.view && r.view.failed) || null, has_data: !!(r.view && r.view.has_data),
      ended: (r.view && r.view.ended) || null })),
    view: async (run) => byName.get(run),
    table: async () => (data.table ? { runs: data.table } : null),
    live: false,
    pair: held && { a: held.a, b: held.b, key: first && first.a.key, keyB: first && first.b.key,
      messages: held.messages },
    compare: async (a, b, key, at, keyB = key) => {
      const found = held && held.a === a && held.b === b &&
        comparisons.find((c) => c.held[0].a.key === key && c.held[0].b.key === keyB);
      // at the cursor's step: the newest comparison held at or before it (its first else)
      if (found) return found.held[at == null ? found.held.length - 1 : shownIndex(found.from, at)];
      const has = held ? `the comparison of ${held.a} with ${held.b}` : 'no comparison';
      const tags = keyB === key ? [] : ['--tags', key, keyB];
      const command = shellCommand('learnscope', 'export', 'LOGDIR', '--html', 'PAGE',
        '--compare', a, b, ...tags);
      return missingComparison(a, b, key, `this page holds ${has} only: ${command} makes one ` +
        `of ${key}`, keyB);
    },
  };
}
