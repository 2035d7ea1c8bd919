// Two runs (or two tags) side by side: A's view and B's rotated onto it, coloured by how much of
// each point's neighbourhood (its k nearest neighbours in the full embedding) the two share;
// linked hover and pin, the points whose neighbourhoods differ most, a histogram of the overlap.
// The data is one comparison of the /compare route (or of an exported page), as
// learnscope.plugins.compare_runs makes it.

import { PLAIN_COLOUR, colourScheme, groupByColour } from './colours.js';
import { columnText, el, setupCanvas } from './dom.js';
import { decodeFloat32 } from './model.js';
import { drawPoints, drawRing, frameMapping, nearestPoint, screenPositions } from './scatter.js';

const COMPARE_SIDE = 400; // CSS pixels of each of the two canvases
const OVERLAP_COLOURING = -1; // the colour-by choice "overlap"

/** The colour of an overlap ``t`` in [0, 1]: red (nothing shared) to green (all shared). */
export function overlapColour(t) {
  return `hsl(${Math.round(120 * t)}, 70%, 42%)`;
}

/**
 * The views of comparison ``data`` to draw: its aligned PCA one (when both runs have it), then
 * each further one both have (``projections``: aligned UMAP), as {name, label, xy_a, xy_b,
 * frame, residual}.
 */
export function compareViews(data) {
  const pca = data.xy_a && data.xy_b ? [{ name: 'pca', label: 'PCA', xy_a: data.xy_a,
    xy_b: data.xy_b, frame: data.frame, residual: data.residual }] : [];
  return pca.concat((data.projections || []).filter((p) => p.xy_a && p.xy_b)
    .map((p) => ({ ...p, label: p.label || p.name.toUpperCase() })));
}

/** The name of side ``side`` ({run, key}) of ``data``: its run, and its tag when the tags differ. */
function sideName(data, side) {
  return data.a.key === data.b.key || !side.key ? side.run : `${side.run} ${side.key}`;
}

/**
 * The comparison ``data`` as a section. ``state`` (for tests): runs, tags (key: A's, keyB: B's),
 * steps, shared and compared counts, k, histogram, mean overlap, the ids listed, hovered and
 * pinned point (index into ``data.ids``), the tooltip text, the points drawn in each canvas,
 * the messages shown, whether A and B are identical and the verdict that says so, the
 * projection drawn ('pca', 'umap': a choice where both runs have more than one) and its residual.
 * ``chooseSteps(stepA, stepB)``, when given, asks for other steps.
 */
export class ComparePanel {
  constructor({ data, tip, chooseSteps }) {
    this.data = data;
    this.tip = tip;
    const n = data.ids.length;
    const keyB = (data.b && data.b.key) || data.key;
    this.state = {
      ready: false, a: data.a.run, b: data.b.run, key: data.key, keyB, stepA: data.a.step,
      stepB: data.b.step, shared: data.shared, compared: data.compared, k: data.k,
      histogram: data.histogram, meanOverlap: data.mean_overlap,
      listed: data.differ.map((d) => d.id), hovered: null, pinned: null, tooltip: '',
      drawn: [0, 0], colourBy: 'overlap', messages: data.messages.slice(),
      identical: !!data.identical, verdict: data.verdict || null, projection: null, residual: null,
    };
    this.element = el('section', { 'data-role': 'compare' });
    const heading = keyB === data.key ? `Compare ${data.a.run} (A) with ${data.b.run} (B): ${data.key}`
      : `Compare ${data.a.run} ${data.key} (A) with ${data.b.run} ${keyB} (B)`;
    this.element.append(el('h2', { text: heading }));
    this.element.append(el('div', { class: 'ls-hint', text: `Each dot is one input both saw; ` +
      `B's view is turned onto A's (orthogonal Procrustes). Colour: of its ${data.k} nearest ` +
      'neighbours in the full embedding, how many are the same in both (green all, red none).' }));
    for (const m of data.messages) this.element.append(el('div', { class: 'ls-msg', 'data-role': 'compare-message', text: m }));
    if (data.verdict) this.element.append(el('div', { class: 'ls-msg', 'data-role': 'compare-verdict', text: data.verdict }));
    for (const m of data.notes) this.element.append(el('div', { class: 'ls-hint', text: m }));
    this.views = compareViews(data);
    this.element.append(this.stepBar(chooseSteps));
    this.frames = null;
    if (this.views.length && n) this.showProjection(this.views[0].name, false);
    if (this.frames) this.buildPictures();
    const side = el('div', { class: 'ls-side' }, [this.summary(), this.histogram(), this.differList()]);
    this.row = el('div', { class: 'ls-row' }, [...(this.canvases || []), side]);
    this.element.append(this.row);
    if (this.frames) this.colourBy(OVERLAP_COLOURING);
    this.state.ready = true;
  }

  stepBar(chooseSteps) {
    const bar = el('div', { class: 'ls-bar' });
    const picks = [['A', this.data.a], ['B', this.data.b]].map(([name, side]) => {
      const select = el('select', { 'aria-label': `step ${name}` },
        side.steps.map((s) => el('option', { value: s, text: `step ${s}` })));
      if (side.step != null) select.value = side.step;
      select.disabled = !chooseSteps;
      bar.append(el('label', {}, [`${name}: ${sideName(this.data, side)} `, select]));
      return select;
    });
    if (chooseSteps) {
      for (const s of picks) s.addEventListener('change', () => chooseSteps(+picks[0].value, +picks[1].value));
    }
    this.projectionSelect = el('select', { 'aria-label': 'compare projection',
      onchange: () => this.showProjection(this.projectionSelect.value) },
    this.views.map((v) => el('option', { value: v.name, text: v.label })));
    if (this.views.length > 1) {
      bar.append(el('label', { 'data-role': 'compare-projection', title: 'The pictures: both ' +
        "runs' aligned PCA views, or both runs' aligned UMAP views, B's turned onto A's" },
      ['projection ', this.projectionSelect]));
    }
    this.colourSelect = el('select', { 'aria-label': 'compare colour by', onchange: () => this.colourBy(+this.colourSelect.value) },
      [el('option', { value: OVERLAP_COLOURING, text: 'neighbourhood overlap' }),
        ...this.data.columns.map((c, i) => el('option', { value: i, text: c.name }))]);
    bar.append(el('label', {}, ['colour by ', this.colourSelect]));
    return bar;
  }

  /**
   * Draw the two runs in projection ``name`` (one of ``views``): A's view and B's turned onto
   * it; the pinned point and the colours stay. ``draw``: draw now.
   */
  showProjection(name, draw = true) {
    const view = this.views.find((v) => v.name === name) || this.views[0];
    this.frames = [decodeFloat32(view.xy_a), decodeFloat32(view.xy_b)];
    this.frame = view.frame;
    const mapping = frameMapping(view.frame, COMPARE_SIDE, COMPARE_SIDE);
    this.positions = this.frames.map((frame) =>
      screenPositions({ ids: this.data.ids, frames: [frame], bounds: view.frame }, 0, mapping));
    Object.assign(this.state, { projection: view.name, residual: view.residual });
    if (this.projectionSelect) this.projectionSelect.value = view.name;
    if (draw) this.draw();
  }

  buildPictures() {
    const n = this.data.ids.length;
    this.canvases = [];
    this.contexts = [];
    ['A', 'B'].forEach((name, side) => {
      const canvas = el('canvas', { 'data-role': `compare-${name}`, class: 'ls-pick' });
      this.contexts.push(setupCanvas(canvas, COMPARE_SIDE, COMPARE_SIDE));
      canvas.addEventListener('mousemove', (ev) => this.hover(this.pointAt(side, ev), ev));
      canvas.addEventListener('mouseleave', () => this.hover(null, null));
      canvas.addEventListener('click', (ev) => this.pin(this.pointAt(side, ev)));
      this.canvases.push(el('div', {}, [el('div', { text: `${name}: ${sideName(this.data, this.data[name.toLowerCase()])}` }), canvas]));
    });
    this.count = n;
  }

  summary() {
    const d = this.data;
    const lines = [`${d.shared.toLocaleString()} shared points` +
      (d.compared < d.shared ? `, ${d.compared.toLocaleString()} compared` : '') +
      ` (A ${d.a.points.toLocaleString()}, B ${d.b.points.toLocaleString()})`];
    if (d.mean_overlap != null) lines.push(`mean overlap ${(d.mean_overlap * 100).toFixed(1)}% of ${d.k} neighbours`);
    if (d.identical) lines.push('A and B are identical');
    return el('div', { 'data-role': 'compare-summary' }, lines.map((t) => el('div', { text: t })));
  }

  histogram() {
    const counts = this.data.histogram;
    if (!counts) return el('div');
    const most = Math.max(1, ...counts);
    const bars = counts.map((c, i) => el('div', { class: 'ls-hbar', title: `${i}/${this.data.k}: ${c}` }, [
      el('div', { 'data-count': i, class: 'ls-hcount', text: String(c) }),
      el('div', { style: `height:${Math.round((60 * c) / most)}px;background:${overlapColour(i / this.data.k)}` }),
      el('div', { class: 'ls-hlabel', text: String(i) })]));
    return el('div', {}, [el('h2', { text: `Neighbours in common (of ${this.data.k})` }),
      el('div', { class: 'ls-hist', 'data-role': 'compare-histogram' }, bars)]);
  }

  differList() {
    const d = this.data;
    if (!d.overlap) return el('div');
    if (!d.differ.length) {
      return el('div', {}, [el('h2', { text: 'Neighbourhoods that differ most' }),
        el('div', { 'data-role': 'compare-differ-none', text: `none: every point keeps its ${d.k} nearest neighbours` })]);
    }
    const names = d.columns.map((c) => c.name);
    const rows = d.differ.map((p) => el('tr', { class: 'ls-click', 'data-index': p.index, onclick: () => this.pin(p.index) },
      [p.id, `${p.overlap}/${d.k}`, ...names.map((n) => String(p.metadata[n]))].map((t) => el('td', { text: t }))));
    return el('div', {}, [el('h2', { text: 'Neighbourhoods that differ most' }),
      el('div', { class: 'ls-movers' }, el('table', { 'data-role': 'compare-differ' }, [
        el('tr', {}, ['id', 'overlap', ...names].map((t) => el('th', { text: t }))), ...rows]))]);
  }

  colourBy(index) {
    const n = this.data.ids.length;
    const column = this.data.columns[index] || null;
    let scheme;
    if (column) {
      scheme = colourScheme(column, n);
    } else {
      const k = this.data.k, overlap = this.data.overlap;
      const colours = Array.from({ length: k + 1 }, (_, i) => overlapColour(i / k)).concat([PLAIN_COLOUR]);
      scheme = { colours, bucket: Int32Array.from({ length: n }, (_, i) => (overlap ? overlap[i] : k + 1)) };
    }
    this.state.colourBy = column ? column.name : 'overlap';
    this.colours = scheme.colours;
    this.groups = groupByColour(scheme.bucket, scheme.colours.length);
    this.draw();
  }

  draw() {
    if (!this.frames) return;
    this.contexts.forEach((ctx, side) => {
      ctx.clearRect(0, 0, COMPARE_SIDE, COMPARE_SIDE);
      const pos = this.positions[side];
      this.state.drawn[side] = drawPoints(ctx, pos, this.groups, this.colours, 2.5);
      if (this.state.pinned != null) drawRing(ctx, pos, this.state.pinned, '#000');
      if (this.state.hovered != null) drawRing(ctx, pos, this.state.hovered, '#ff6f00');
    });
  }

  pointAt(side, ev) {
    const r = this.canvases[side].querySelector('canvas').getBoundingClientRect();
    return nearestPoint(this.positions[side], this.count, ev.clientX - r.left, ev.clientY - r.top);
  }

  describe(k) {
    const d = this.data;
    const overlap = d.overlap ? `${d.overlap[k]}/${d.k} neighbours in common` : 'overlap not computed';
    return [`id ${d.ids[k]}`, overlap, ...d.columns.map((c) => `${c.name}: ${columnText(c, k)}`)];
  }

  /** Ring point ``k`` (or none) in both pictures, its tooltip at the mouse event ``ev``. */
  hover(k, ev) {
    this.state.hovered = k;
    if (k == null || !ev) {
      this.tip.style.display = 'none';
    } else {
      this.tip.textContent = '';
      this.tip.append(...this.describe(k).map((t) => el('div', { text: t })));
      this.tip.style.left = ev.clientX + 14 + 'px';
      this.tip.style.top = ev.clientY + 10 + 'px';
      this.tip.style.display = 'block';
    }
    this.state.tooltip = k == null ? '' : this.tip.textContent;
    this.draw();
  }

  /** Select point ``k`` (or none) in both pictures and in the list. */
  pin(k) {
    this.state.pinned = k;
    for (const tr of this.element.querySelectorAll('tr[data-index]')) {
      tr.style.background = +tr.getAttribute('data-index') === k ? '#fff3e0' : '';
    }
    this.draw();
  }
}
