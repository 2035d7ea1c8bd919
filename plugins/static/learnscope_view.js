// learnscope training-dynamics view: embedding evolution, autocorrelation, findings.
//
// One ES module, vanilla JavaScript and canvas 2D, nothing loaded from the network. Two hosts:
//  * TensorBoard's dynamic plugin loader imports it and calls render(): the data comes from the
//    plugin's routes ./runs and ./view?run=... (relative to data/plugin/learnscope/).
//  * A standalone page (learnscope export) inlines it as a module script beside
//    a JSON script element, id "learnscope-data", holding {"runs": [{"name", "view"}]};
//    the module then mounts itself.
// Coordinates come in units of each snapshot's spread and are drawn in the run record's fixed
// frame per key (the same picture as the Images tab); the tab opens the newest run.
// window.learnscopeView exposes the state (point counts, frames drawn, hovered point) for tests.

const PALETTE = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf',
];
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const SECONDS_PER_SNAPSHOT = 0.8;
const NEIGHBOURS = 10;
const NUMERIC_BINS = 32;

const CSS = `
.ls-root { font: 13px/1.4 Roboto, Arial, sans-serif; color: #212121; padding: 12px 16px; }
.ls-root h2 { font-size: 15px; margin: 18px 0 6px; font-weight: 500; }
.ls-root .ls-bar { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 4px 0; }
.ls-root .ls-msg { background: #fff8e1; border-left: 3px solid #f9a825; padding: 4px 8px; margin: 3px 0; }
.ls-root .ls-row { display: flex; gap: 16px; align-items: flex-start; flex-wrap: wrap; }
.ls-root canvas { border: 1px solid #e0e0e0; background: #fff; }
.ls-root .ls-side { min-width: 220px; max-width: 320px; }
.ls-root .ls-legend span { display: inline-flex; align-items: center; margin: 0 8px 2px 0; }
.ls-root .ls-swatch { width: 10px; height: 10px; display: inline-block; margin-right: 4px; }
.ls-root .ls-tip { position: fixed; pointer-events: none; background: rgba(33,33,33,.92);
  color: #fff; padding: 4px 7px; border-radius: 3px; font-size: 12px; display: none; z-index: 9; }
.ls-root table { border-collapse: collapse; }
.ls-root td, .ls-root th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }
.ls-root tr.ls-click { cursor: pointer; }
.ls-root tr.ls-click:hover { background: #f5f5f5; }
.ls-root .ls-movers { max-height: 260px; overflow: auto; }
.ls-root button { cursor: pointer; }
`;

// ---------------------------------------------------------------------------- data decoding

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
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const table = halfTable();
  const out = new Float32Array(bytes.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
  return out;
}

function prepareEmbedding(e) {
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

// ---------------------------------------------------------------------------- small helpers

function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'style') node.style.cssText = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of [].concat(children || [])) {
    if (child != null) node.append(child);
  }
  return node;
}

/** What an empty section says: the view's status for it (capitalised), else ``fallback``. */
function statusText(view, section, fallback) {
  const text = view.status && view.status[section];
  return text ? text.charAt(0).toUpperCase() + text.slice(1) + '.' : fallback;
}

const OTHER_COLOUR = '#bdbdbd';

/** The value of column ``c`` at point ``k`` as text ("other" for a point of no category). */
function columnText(c, k) {
  if (c.kind === 'categorical') {
    const name = c.categories[c.codes[k]];
    return name === undefined ? 'other' : name;
  }
  const v = c.values[k];
  return v == null ? 'NaN' : String(v);
}

function categoryColour(i) {
  if (i < PALETTE.length) return PALETTE[i];
  return `hsl(${(i * 137.508) % 360}, 55%, 50%)`;
}

function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function diverging(v) {
  // -1 blue, 0 white, +1 red; null grey.
  if (v == null || !Number.isFinite(v)) return '#e0e0e0';
  const t = Math.max(-1, Math.min(1, v));
  const a = Math.abs(t);
  const to = t < 0 ? [33, 102, 172] : [178, 24, 43];
  const c = to.map((x) => Math.round(255 + (x - 255) * a));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function setupCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = width + 'px';
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/** For each point, indices of its k nearest neighbours (2D, brute force), as an Int32Array. */
export function nearestNeighbours(frame, n, k) {
  const out = new Int32Array(n * k).fill(-1);
  const best = new Float64Array(k);
  for (let i = 0; i < n; i++) {
    best.fill(Infinity);
    const xi = frame[2 * i], yi = frame[2 * i + 1];
    const base = i * k;
    for (let j = 0; j < n; j++) {
      if (j === i) continue;
      const dx = frame[2 * j] - xi, dy = frame[2 * j + 1] - yi;
      const d = dx * dx + dy * dy;
      if (!(d < best[k - 1])) continue;
      let p = k - 1;
      while (p > 0 && best[p - 1] > d) {
        best[p] = best[p - 1];
        out[base + p] = out[base + p - 1];
        p--;
      }
      best[p] = d;
      out[base + p] = j;
    }
  }
  return out;
}

/** Fraction of each point's k nearest neighbours replaced between two frames. */
export function neighbourChange(frameA, frameB, n, k) {
  const a = nearestNeighbours(frameA, n, k);
  const b = nearestNeighbours(frameB, n, k);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const set = new Set(a.subarray(i * k, i * k + k));
    let kept = 0;
    for (let j = 0; j < k; j++) if (set.has(b[i * k + j])) kept++;
    out[i] = 1 - kept / k;
  }
  return out;
}

// ---------------------------------------------------------------------------- the view

class View {
  constructor(root, source) {
    this.root = root;
    this.source = source;
    this.state = {
      ready: false, run: null, key: null, points: 0, pointsTotal: 0, steps: [], position: 0,
      playing: false, frames: 0, drawnPoints: 0, hovered: null, pinned: null, colourBy: null,
      movers: [], error: null,
    };
    this.sprite = null;
    root.classList.add('ls-root');
    root.append(el('style', { text: CSS }));
    this.header = el('div', { class: 'ls-bar' });
    this.messages = el('div');
    this.body = el('div');
    root.append(this.header, this.messages, this.body);
    this.tip = el('div', { class: 'ls-tip' });
    root.append(this.tip);
  }

  async start() {
    // Runs are {name, time} (time: when the run started); the newest is opened.
    const runs = (await this.source.runs()).map((r) => (typeof r === 'string' ? { name: r, time: 0 } : r));
    const select = el('select', { onchange: () => this.loadRun(select.value), 'aria-label': 'run' },
      runs.map((r) => el('option', { value: r.name, text: r.name })));
    this.header.append(el('strong', { text: 'learnscope: training dynamics' }),
      el('label', {}, ['run ', select]));
    if (!runs.length) {
      this.messages.append(el('div', { class: 'ls-msg', text: 'No run with learnscope data.' }));
      this.state.ready = true;
      return;
    }
    let newest = runs[0];
    for (const r of runs) if ((r.time || 0) >= (newest.time || 0)) newest = r;
    select.value = newest.name;
    await this.loadRun(newest.name);
  }

  async loadRun(run) {
    this.pause();
    this.acf = null;
    this.current = null;
    this.ctx = null;
    Object.assign(this.state, { ready: false, run, key: null, points: 0, pointsTotal: 0, steps: [],
      position: 0, drawnPoints: 0, hovered: null, pinned: null, colourBy: null, movers: [] });
    this.body.textContent = 'Loading…';
    const view = await this.source.view(run);
    this.view = view;
    this.embeddings = view.embeddings.map(prepareEmbedding);
    this.messages.textContent = '';
    for (const m of view.messages) this.messages.append(el('div', { class: 'ls-msg', text: m }));
    this.body.textContent = '';
    this.buildEmbedding();
    this.buildAutocorrelation();
    this.buildFindings();
    this.state.readyMs = Math.round(performance.now()); // since this page (or iframe) started
    this.state.ready = true;
  }

  // ------------------------------------------------------------------ embedding evolution

  buildEmbedding() {
    const section = el('section');
    this.body.append(section);
    section.append(el('h2', { text: 'Embedding evolution (aligned PCA)' }));
    if (!this.embeddings.length) {
      section.append(el('div', { 'data-role': 'status-embeddings',
        text: statusText(this.view, 'embeddings', 'No embedding snapshots with aligned PCA coordinates.') }));
      return;
    }
    this.tagSelect = el('select', { 'aria-label': 'tag', onchange: () => this.selectTag(+this.tagSelect.value) },
      this.embeddings.map((e, i) => el('option', { value: i, text: e.key })));
    this.colourSelect = el('select', { 'aria-label': 'colour by', onchange: () => this.colourBy(+this.colourSelect.value) });
    this.playButton = el('button', { text: '▶ play', onclick: () => (this.state.playing ? this.pause() : this.play()) });
    this.slider = el('input', { type: 'range', min: 0, max: 0, step: 'any', value: 0, 'aria-label': 'step',
      oninput: () => { this.pause(); this.setPosition(+this.slider.value); } });
    this.slider.style.width = '260px';
    this.stepLabel = el('span');
    this.trails = el('input', { type: 'checkbox', onchange: () => this.draw() });
    section.append(el('div', { class: 'ls-bar' }, [
      el('label', {}, ['tag ', this.tagSelect]), el('label', {}, ['colour by ', this.colourSelect]),
      this.playButton, this.slider, this.stepLabel, el('label', {}, [this.trails, ' trails']),
    ]));
    this.canvas = el('canvas', { 'data-role': 'scatter' });
    this.width = 640; this.height = 480;
    this.ctx = setupCanvas(this.canvas, this.width, this.height);
    this.canvas.addEventListener('mousemove', (ev) => this.onHover(ev));
    this.canvas.addEventListener('mouseleave', () => { this.state.hovered = null; this.tip.style.display = 'none'; this.draw(); });
    this.canvas.addEventListener('click', (ev) => this.onClick(ev));
    this.legend = el('div', { class: 'ls-legend' });
    this.pinInfo = el('div');
    this.note = el('div', { style: 'color:#616161' });
    this.moverFrom = el('select', { 'aria-label': 'movers from' });
    this.moverTo = el('select', { 'aria-label': 'movers to' });
    this.moverList = el('div', { class: 'ls-movers' });
    const side = el('div', { class: 'ls-side' }, [
      this.note, this.legend, this.pinInfo,
      el('h2', { text: `Movers: ${NEIGHBOURS} nearest neighbours replaced` }),
      el('div', { class: 'ls-bar' }, ['from ', this.moverFrom, ' to ', this.moverTo,
        el('button', { text: 'find', onclick: () => this.findMovers() })]),
      this.moverList,
    ]);
    section.append(el('div', { class: 'ls-row' }, [this.canvas, side]));
    this.selectTag(0);
  }

  selectTag(index) {
    this.pause();
    const e = this.embeddings[index];
    this.current = e;
    const n = e.ids.length;
    Object.assign(this.state, { key: e.key, points: n, pointsTotal: e.points_total, steps: e.steps,
      hovered: null, pinned: null, movers: [] });
    this.colourSelect.textContent = '';
    e.columns.forEach((c, i) => this.colourSelect.append(el('option', { value: i, text: c.name })));
    if (!e.columns.length) this.colourSelect.append(el('option', { value: -1, text: '(none)' }));
    this.slider.max = e.steps.length - 1;
    for (const s of [this.moverFrom, this.moverTo]) {
      s.textContent = '';
      e.steps.forEach((step, i) => s.append(el('option', { value: i, text: `step ${step}` })));
    }
    this.moverFrom.value = Math.max(0, e.steps.length - 2);
    this.moverTo.value = e.steps.length - 1;
    this.note.textContent = `${n.toLocaleString()} points` +
      (e.points_total > n ? ` of ${e.points_total.toLocaleString()} (a fixed subsample by id)` : '') +
      `, ${e.steps.length} snapshot${e.steps.length === 1 ? '' : 's'}`;
    this.moverList.textContent = '';
    this.sprite = null;
    if (e.sprite) {
      const img = new Image();
      img.onload = () => { this.sprite = img; };
      img.src = e.sprite.png;
    }
    this.colourBy(e.columns.length ? 0 : -1);
    this.setPosition(e.steps.length - 1);
  }

  colourBy(index) {
    const e = this.current;
    const column = e.columns[index] || null;
    this.state.colourBy = column ? column.name : null;
    const n = e.ids.length;
    const bucket = new Int32Array(n);
    let colours = ['#1f77b4'];
    this.legend.textContent = '';
    if (column && column.kind === 'categorical') {
      // The categories in "coloured" (the most frequent, as in the Images-tab picture) get a
      // colour each; the points of any other category, or of none (-1), are "other".
      const coloured = column.coloured || column.categories.map((_, i) => i);
      const colourOf = new Map(coloured.map((c, i) => [c, i]));
      const other = coloured.length;
      colours = coloured.map((_, i) => categoryColour(i)).concat([OTHER_COLOUR]);
      let others = 0;
      for (let i = 0; i < n; i++) {
        const c = colourOf.get(column.codes[i]);
        bucket[i] = c === undefined ? other : c;
        if (bucket[i] === other) others++;
      }
      coloured.forEach((c, i) => this.legend.append(el('span', {}, [
        el('span', { class: 'ls-swatch', style: `background:${colours[i]}` }), column.categories[c]])));
      if (others) this.legend.append(el('span', {}, [
        el('span', { class: 'ls-swatch', style: `background:${OTHER_COLOUR}` }), 'other']));
    } else if (column) {
      let lo = Infinity, hi = -Infinity;
      for (const v of column.values) {
        if (v == null || !Number.isFinite(v)) continue;
        if (v < lo) lo = v; if (v > hi) hi = v;
      }
      if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
      colours = Array.from({ length: NUMERIC_BINS }, (_, i) => viridis(i / (NUMERIC_BINS - 1)));
      colours.push(OTHER_COLOUR); // no number (NaN): grey
      for (let i = 0; i < n; i++) {
        const v = column.values[i];
        bucket[i] = v == null || !Number.isFinite(v) ? NUMERIC_BINS
          : Math.round(((v - lo) / (hi - lo || 1)) * (NUMERIC_BINS - 1));
      }
      const bar = el('canvas');
      const ctx = setupCanvas(bar, 160, 10);
      for (let i = 0; i < 160; i++) { ctx.fillStyle = viridis(i / 159); ctx.fillRect(i, 0, 1, 10); }
      this.legend.append(el('span', {}, [`${lo.toPrecision(3)} `, bar, ` ${hi.toPrecision(3)}`]));
    }
    // Points grouped by colour: one fillStyle and one path per colour when drawing.
    this.groups = colours.map(() => []);
    for (let i = 0; i < n; i++) this.groups[bucket[i]].push(i);
    this.groups = this.groups.map((g) => Int32Array.from(g));
    this.colours = colours;
    this.draw();
  }

  setPosition(p) {
    const e = this.current;
    const last = e.steps.length - 1;
    this.state.position = Math.max(0, Math.min(last, p));
    this.slider.value = this.state.position;
    const i = Math.round(this.state.position);
    const spread = e.spreads ? e.spreads[i] : null;
    this.stepLabel.textContent = `step ${e.steps[i]} (${i + 1}/${e.steps.length})` +
      (spread != null && e.units === 'spread' ? `, spread ${Number(spread).toPrecision(3)}` : '');
    this.draw();
    if (this.acf) this.syncAutocorrelation(e.steps[i]);
  }

  play() {
    if (!this.current || this.current.steps.length < 2) return;
    this.state.playing = true;
    this.playButton.textContent = '❚❚ pause';
    if (this.state.position >= this.current.steps.length - 1) this.state.position = 0;
    let last = performance.now();
    const tick = (now) => {
      if (!this.state.playing) return;
      const dt = (now - last) / 1000;
      last = now;
      let p = this.state.position + dt / SECONDS_PER_SNAPSHOT;
      if (p > this.current.steps.length - 1) p = 0; // loop
      this.setPosition(p);
      this.state.frames++;
      this.raf = requestAnimationFrame(tick);
    };
    this.raf = requestAnimationFrame(tick);
  }

  pause() {
    this.state.playing = false;
    if (this.raf) cancelAnimationFrame(this.raf);
    if (this.playButton) this.playButton.textContent = '▶ play';
  }

  /** Screen (canvas pixel) positions of every point at the current position. */
  positions() {
    const e = this.current;
    const n = e.ids.length;
    const p = this.state.position;
    const i = Math.floor(p), f = p - i;
    const a = e.frames[i], b = e.frames[Math.min(i + 1, e.frames.length - 1)];
    const [x0, x1, y0, y1] = e.bounds;
    const { scale, left, top } = this.mapping();
    const out = this.pos && this.pos.length === 2 * n ? this.pos : new Float32Array(2 * n);
    for (let k = 0; k < n; k++) {
      // Points outside the frame are drawn on its edge, as in the Images-tab picture.
      const x = Math.min(x1, Math.max(x0, a[2 * k] + (b[2 * k] - a[2 * k]) * f));
      const y = Math.min(y1, Math.max(y0, a[2 * k + 1] + (b[2 * k + 1] - a[2 * k + 1]) * f));
      out[2 * k] = left + (x - x0) * scale;
      out[2 * k + 1] = top + (y1 - y) * scale;
    }
    this.pos = out;
    return out;
  }

  /** One scale for x and y (the frame keeps its shape), the frame centred on the canvas. */
  mapping() {
    const [x0, x1, y0, y1] = this.current.bounds;
    const scale = Math.min(this.width / (x1 - x0), this.height / (y1 - y0));
    return { scale, left: (this.width - (x1 - x0) * scale) / 2, top: (this.height - (y1 - y0) * scale) / 2 };
  }

  frameToScreen(frame, k) {
    const [x0, x1, y0, y1] = this.current.bounds;
    const { scale, left, top } = this.mapping();
    const x = Math.min(x1, Math.max(x0, frame[2 * k])), y = Math.min(y1, Math.max(y0, frame[2 * k + 1]));
    return [left + (x - x0) * scale, top + (y1 - y) * scale];
  }

  draw() {
    if (!this.ctx || !this.current) return;
    const ctx = this.ctx;
    const pos = this.positions();
    ctx.clearRect(0, 0, this.width, this.height);
    const { scale, left, top } = this.mapping();
    const [x0, x1, y0, y1] = this.current.bounds;
    ctx.strokeStyle = '#eeeeee';
    ctx.lineWidth = 1;
    ctx.strokeRect(left, top, (x1 - x0) * scale, (y1 - y0) * scale);
    if (this.trails.checked) this.drawTrails(ctx);
    let drawn = 0;
    const r = this.current.ids.length > 2000 ? 1.5 : 2.5;
    for (let c = 0; c < this.groups.length; c++) {
      const g = this.groups[c];
      if (!g.length) continue;
      ctx.fillStyle = this.colours[c];
      ctx.beginPath();
      for (let j = 0; j < g.length; j++) {
        const k = g[j];
        const x = pos[2 * k], y = pos[2 * k + 1];
        if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
        ctx.rect(x - r, y - r, 2 * r, 2 * r);
        drawn++;
      }
      ctx.fill();
    }
    this.state.drawnPoints = drawn;
    for (const [k, colour] of [[this.state.pinned, '#000'], [this.state.hovered, '#d50000']]) {
      if (k == null) continue;
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(pos[2 * k], pos[2 * k + 1], 6, 0, 2 * Math.PI);
      ctx.stroke();
    }
    if (this.state.pinned != null) this.drawPath(ctx, this.state.pinned);
  }

  drawTrails(ctx) {
    const e = this.current;
    const i = Math.floor(this.state.position);
    const from = Math.max(0, i - 3);
    ctx.strokeStyle = 'rgba(120,120,120,0.35)';
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 0; k < e.ids.length; k++) {
      let [x, y] = this.frameToScreen(e.frames[from], k);
      ctx.moveTo(x, y);
      for (let s = from + 1; s <= i; s++) { [x, y] = this.frameToScreen(e.frames[s], k); ctx.lineTo(x, y); }
      ctx.lineTo(this.pos[2 * k], this.pos[2 * k + 1]);
    }
    ctx.stroke();
  }

  drawPath(ctx, k) {
    const e = this.current;
    ctx.strokeStyle = 'rgba(0,0,0,0.6)';
    ctx.lineWidth = 1;
    ctx.beginPath();
    e.frames.forEach((f, s) => {
      const [x, y] = this.frameToScreen(f, k);
      if (s === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }

  pointAt(ev) {
    const rect = this.canvas.getBoundingClientRect();
    const mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
    const pos = this.pos || this.positions();
    let best = null, bestD = 64; // within 8 px
    for (let k = 0; k < this.current.ids.length; k++) {
      const dx = pos[2 * k] - mx, dy = pos[2 * k + 1] - my;
      const d = dx * dx + dy * dy;
      if (d < bestD) { bestD = d; best = k; }
    }
    return best;
  }

  describe(k) {
    const e = this.current;
    const lines = [`id ${e.ids[k]}`];
    for (const c of e.columns) {
      lines.push(`${c.name}: ${columnText(c, k)}`);
    }
    return lines;
  }

  thumbnail(k) {
    const s = this.current.sprite;
    if (!s || !this.sprite) return null;
    const row = s.rows[k];
    const canvas = el('canvas');
    const ctx = setupCanvas(canvas, 48, 48);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.sprite, (row % s.per_row) * s.width, Math.floor(row / s.per_row) * s.height,
      s.width, s.height, 0, 0, 48, 48);
    return canvas;
  }

  onHover(ev) {
    const k = this.pointAt(ev);
    this.state.hovered = k;
    if (k == null) {
      this.tip.style.display = 'none';
    } else {
      this.tip.textContent = '';
      this.tip.append(...this.describe(k).map((t) => el('div', { text: t })));
      const thumb = this.thumbnail(k);
      if (thumb) this.tip.append(thumb);
      this.tip.style.left = ev.clientX + 14 + 'px';
      this.tip.style.top = ev.clientY + 10 + 'px';
      this.tip.style.display = 'block';
    }
    this.state.tooltip = k == null ? '' : this.tip.textContent;
    if (!this.state.playing) this.draw();
  }

  onClick(ev) {
    this.pin(this.pointAt(ev));
  }

  pin(k) {
    this.state.pinned = k;
    this.pinInfo.textContent = '';
    if (k != null) {
      this.pinInfo.append(el('h2', { text: 'Pinned point' }),
        ...this.describe(k).map((t) => el('div', { text: t })),
        el('button', { text: 'unpin', onclick: () => this.pin(null) }));
      const thumb = this.thumbnail(k);
      if (thumb) this.pinInfo.append(thumb);
    }
    this.draw();
  }

  findMovers() {
    const e = this.current;
    const a = +this.moverFrom.value, b = +this.moverTo.value;
    const n = e.ids.length;
    const change = neighbourChange(e.frames[a], e.frames[b], n, Math.min(NEIGHBOURS, n - 1));
    const order = Array.from({ length: n }, (_, i) => i).sort((i, j) => change[j] - change[i]);
    const top = order.slice(0, 20);
    this.state.movers = top.map((k) => ({ id: e.ids[k], change: change[k] }));
    const label = e.columns[0];
    this.moverList.textContent = '';
    this.moverList.append(el('table', {}, [
      el('tr', {}, [el('th', { text: 'id' }), el('th', { text: label ? label.name : '' }),
        el('th', { text: 'replaced' })]),
      ...top.map((k) => el('tr', { class: 'ls-click', onclick: () => this.pin(k) }, [
        el('td', { text: e.ids[k] }),
        el('td', { text: label ? columnText(label, k) : '' }),
        el('td', { text: `${Math.round(change[k] * 100)}%` }),
      ])),
    ]));
  }

  // ------------------------------------------------------------------ autocorrelation

  buildAutocorrelation() {
    const section = el('section');
    this.body.append(section);
    section.append(el('h2', { text: 'Autocorrelation of parameters and gradients' }));
    const kinds = this.view.autocorrelation;
    this.acf = null;
    if (!kinds.length) {
      section.append(el('div', { 'data-role': 'status-autocorrelation',
        text: statusText(this.view, 'autocorrelation', 'No autocorrelation analysis in this run.') }));
      return;
    }
    const steps = [...new Set(kinds.flatMap((k) => k.steps))].sort((a, b) => a - b);
    this.acf = { kinds, steps, panels: [] };
    this.acfSlider = el('input', { type: 'range', min: 0, max: steps.length - 1, step: 1, value: steps.length - 1,
      'aria-label': 'analysis step', oninput: () => this.drawAutocorrelation(+this.acfSlider.value) });
    this.acfLabel = el('span');
    section.append(el('div', { class: 'ls-bar' }, ['analysis step ', this.acfSlider, this.acfLabel]));
    for (const kind of kinds) {
      const rows = kind.groups.length;
      const heat = el('canvas', { 'data-role': `acf-${kind.kind}` });
      const hw = 110 + 52 * kind.lags.length, hh = 40 + 24 * rows;
      const line = el('canvas');
      this.acf.panels.push({ kind, heat, heatCtx: setupCanvas(heat, hw, hh), hw, hh,
        line, lineCtx: setupCanvas(line, 420, Math.max(hh, 160)), lw: 420, lh: Math.max(hh, 160) });
      section.append(el('div', {}, [el('div', { text: `${kind.kind}: mean autocorrelation by lag, and lag-1 median over steps` }),
        el('div', { class: 'ls-row' }, [heat, line])]));
    }
    const legend = el('canvas');
    const ctx = setupCanvas(legend, 200, 12);
    for (let i = 0; i < 200; i++) { ctx.fillStyle = diverging(i / 99.5 - 1); ctx.fillRect(i, 0, 1, 12); }
    section.append(el('div', { class: 'ls-legend' }, ['-1 ', legend, ' +1']));
    this.drawAutocorrelation(steps.length - 1);
    if (this.current) this.syncAutocorrelation(this.current.steps[Math.round(this.state.position)]);
  }

  syncAutocorrelation(step) {
    // The latest analysis at or before the embedding step (else the first).
    const steps = this.acf.steps;
    let index = 0;
    for (let i = 0; i < steps.length; i++) if (steps[i] <= step) index = i;
    if (+this.acfSlider.value !== index) { this.acfSlider.value = index; this.drawAutocorrelation(index); }
  }

  drawAutocorrelation(index) {
    const step = this.acf.steps[index];
    this.acfLabel.textContent = `step ${step}`;
    for (const p of this.acf.panels) {
      const { kind, heatCtx: ctx, hw, hh } = p;
      ctx.clearRect(0, 0, hw, hh);
      ctx.font = '11px sans-serif';
      ctx.fillStyle = '#424242';
      ctx.textAlign = 'center';
      kind.lags.forEach((lag, j) => ctx.fillText(`lag ${lag}`, 110 + 52 * j + 26, 14));
      const si = kind.steps.indexOf(step);
      kind.groups.forEach((g, r) => {
        ctx.fillStyle = '#424242';
        ctx.textAlign = 'right';
        ctx.fillText(g.length > 16 ? g.slice(0, 15) + '…' : g, 104, 24 + 24 * r + 16);
        kind.lags.forEach((_, j) => {
          const v = si < 0 ? null : kind.values[si][r][j];
          ctx.fillStyle = diverging(v);
          ctx.fillRect(110 + 52 * j, 22 + 24 * r, 50, 22);
          ctx.fillStyle = v != null && Math.abs(v) > 0.6 ? '#fff' : '#212121';
          ctx.textAlign = 'center';
          ctx.fillText(v == null ? '–' : v.toFixed(2), 110 + 52 * j + 25, 22 + 24 * r + 15);
        });
      });
      this.drawLagOne(p, step);
    }
  }

  drawLagOne(p, step) {
    const { kind, lineCtx: ctx, lw, lh } = p;
    ctx.clearRect(0, 0, lw, lh);
    const left = 40, right = lw - 90, top = 10, bottom = lh - 22;
    const s0 = kind.steps[0], s1 = kind.steps[kind.steps.length - 1];
    const sx = (s) => left + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (right - left);
    let lo = Infinity, hi = -Infinity;
    for (const row of kind.rho1) for (const v of row) if (v != null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!Number.isFinite(lo)) { lo = -1; hi = 1; }
    const pad = Math.max(0.02, (hi - lo) * 0.1);
    lo = Math.max(-1, lo - pad); hi = Math.min(1, hi + pad);
    const sy = (v) => top + (1 - (v - lo) / (hi - lo || 1)) * (bottom - top);
    ctx.strokeStyle = '#bdbdbd';
    ctx.lineWidth = 1;
    ctx.strokeRect(left, top, right - left, bottom - top);
    ctx.font = '10px sans-serif';
    ctx.fillStyle = '#616161';
    ctx.textAlign = 'right';
    for (const v of [lo, hi]) ctx.fillText(v.toFixed(2), left - 4, sy(v) + 3);
    if (lo < 0 && hi > 0) ctx.fillText('0', left - 4, sy(0) + 3);
    ctx.textAlign = 'center';
    ctx.fillText(String(s0), left, lh - 6);
    ctx.fillText(String(s1), right, lh - 6);
    ctx.strokeStyle = '#9e9e9e';
    ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(sx(step), top); ctx.lineTo(sx(step), bottom); ctx.stroke();
    ctx.setLineDash([]);
    kind.groups.forEach((g, r) => {
      ctx.strokeStyle = categoryColour(r);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let pen = false;
      kind.steps.forEach((s, i) => {
        const v = kind.rho1[r][i];
        if (v == null) { pen = false; return; }
        if (pen) ctx.lineTo(sx(s), sy(v)); else ctx.moveTo(sx(s), sy(v));
        pen = true;
      });
      ctx.stroke();
      ctx.fillStyle = categoryColour(r);
      ctx.textAlign = 'left';
      ctx.fillText(g.length > 14 ? g.slice(0, 13) + '…' : g, right + 6, top + 12 + 12 * r);
    });
  }

  // ------------------------------------------------------------------ findings

  buildFindings() {
    const section = el('section');
    this.body.append(section);
    const findings = this.view.findings;
    section.append(el('h2', { text: `Findings (${findings.length})` }));
    if (!findings.length) {
      section.append(el('div', { 'data-role': 'status-findings',
        text: statusText(this.view, 'findings', 'No findings: nothing looked wrong.') }));
      return;
    }
    const steps = findings.map((f) => f.step).concat(this.current ? this.current.steps : []);
    const s0 = Math.min(...steps), s1 = Math.max(...steps);
    const canvas = el('canvas', { 'data-role': 'findings' });
    const w = 640, h = 46;
    const ctx = setupCanvas(canvas, w, h);
    const sx = (s) => 10 + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (w - 20);
    ctx.strokeStyle = '#9e9e9e';
    ctx.beginPath(); ctx.moveTo(10, 24); ctx.lineTo(w - 10, 24); ctx.stroke();
    const colour = { error: '#c62828', warning: '#f9a825', info: '#1565c0' };
    for (const f of findings) {
      ctx.fillStyle = colour[f.severity] || '#616161';
      ctx.beginPath(); ctx.arc(sx(f.step), 24, 5, 0, 2 * Math.PI); ctx.fill();
    }
    ctx.fillStyle = '#616161';
    ctx.font = '10px sans-serif';
    ctx.textAlign = 'left'; ctx.fillText(`step ${s0}`, 10, 42);
    ctx.textAlign = 'right'; ctx.fillText(`step ${s1}`, w - 10, 42);
    section.append(canvas);
    section.append(el('table', {}, [
      el('tr', {}, ['step', 'severity', 'code', 'subject', 'message'].map((t) => el('th', { text: t }))),
      ...findings.map((f) => el('tr', { class: 'ls-click', title: 'show this step', onclick: () => this.goToStep(f.step) },
        [f.step, f.severity, f.code, f.subject, f.message].map((t) => el('td', { text: String(t) })))),
    ]));
  }

  goToStep(step) {
    if (this.current) {
      this.pause();
      let index = 0;
      this.current.steps.forEach((s, i) => { if (s <= step) index = i; });
      this.setPosition(index);
    } else if (this.acf) {
      this.syncAutocorrelation(step);
    }
  }
}

// ---------------------------------------------------------------------------- hosts

function expose(view) {
  window.learnscopeView = view;
  return view;
}

/** Mount the view in ``container`` with a data source {runs(): [names], view(name): view}. */
export async function mount(container, source) {
  const view = expose(new View(container, source));
  try {
    await view.start();
  } catch (error) {
    view.state.error = String(error);
    container.append(el('div', { class: 'ls-msg', text: `learnscope view failed: ${error}` }));
    throw error;
  }
  return view;
}

/** TensorBoard's dynamic plugin entry point: data from this plugin's routes. */
export async function render() {
  const container = el('div');
  document.body.style.margin = '0';
  document.body.append(container);
  const json = async (url) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
    return response.json();
  };
  return mount(container, {
    runs: () => json('./runs'),
    view: (run) => json('./view?' + new URLSearchParams({ run })),
  });
}

/** The standalone page: data inline in the JSON script element "learnscope-data". */
export function renderInline() {
  const data = JSON.parse(document.getElementById('learnscope-data').textContent);
  const byName = new Map(data.runs.map((r) => [r.name, r.view]));
  const container = el('div');
  document.body.append(container);
  return mount(container, {
    runs: async () => data.runs.map((r) => ({ name: r.name, time: (r.view && r.view.time) || 0 })),
    view: async (run) => byName.get(run),
  });
}

if (typeof document !== 'undefined' && document.getElementById('learnscope-data')) {
  renderInline();
}
