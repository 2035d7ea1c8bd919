// Two runs (or two tags) side by side: A's view and B's rotated onto it, coloured by how much of
// each point's neighbourhood (its k nearest neighbours in the full embedding) the two share, or
// by a metadata column (with the embedding scatter's legend); linked hover and pin, the points
// whose neighbourhoods differ most, a histogram of the overlap and how to read it. It follows
// the page's step cursor (each run at its newest snapshot at or before the cursor's step: the
// tab asks its server, an exported page looks among the comparisons it holds) and the page's
// projection menu (PCA or UMAP, where both runs have it). The data is one comparison of the
// /compare route (or of an exported page), as learnscope.plugins.views.compare_runs makes it.

import { colourScheme, groupByColour, PLAIN_COLOUR } from './colours.js';
import { relation, shownIndex } from './cursor.js';
import { columnText, el, setupCanvas } from './dom.js';
import { showLegend } from './legend.js';
import { decodeFloat32 } from './model.js';
import { drawPoints, drawRing, frameMapping, nearestPoint, screenPositions } from './scatter.js';

const COMPARE_SIDE = 400; // CSS pixels of each of the two canvases
const COMPARE_POINT = 2.5; // half the side of a drawn point, CSS pixels
const OVERLAP_COLOURING = -1; // the colour-by choice "overlap"
// The mean overlap of two seeds of the learnscope demo (a healthy MLP on the digits; 540
// validation digits, k = 10), at its first snapshot (step 20) and its last (step 160): measured
// with `learnscope demo --seed 1` and `learnscope demo --seed 0` in one log dir (docs/views.md).
const DEMO_SEEDS = { first: 0.19, last: 0.34 };

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

/** ``share`` (0 to 1) as a percentage with one decimal. */
function percent(share) {
  return `${(100 * share).toFixed(1)}%`;
}

/**
 * How to read a mean overlap of ``k`` neighbours among ``compared`` points, whose ``chance``
 * level is k / (compared - 1), as lines: what is good and bad; chance, 100% and what two seeds
 * of a healthy model keep.
 */
export function overlapScale(k, compared, chance) {
  const demo = (share) => `${Math.round(100 * share)}%`;
  return ['Good: far above chance: A and B put the same points near each other. Bad: near ' +
    'chance: no more in common than two unrelated embeddings.',
  `Chance: ${k}/${compared - 1} = ${percent(chance)} (${k} neighbours among these ` +
    `${compared.toLocaleString()} points). 100%: the same ${k} nearest neighbours for every ` +
    'point, as two runs of one seed give. Two seeds of the learnscope demo (a healthy MLP on ' +
    `digits) keep ${demo(DEMO_SEEDS.first)} at their first snapshot and ` +
    `${demo(DEMO_SEEDS.last)} at their last.`];
}

/**
 * The comparison ``data`` as a section that follows the step ``cursor`` and the page's
 * ``projection`` choice (a ProjectionChoice), asking ``ask(step)`` (a promise of a comparison)
 * for the comparison at another cursor step. ``state`` (for tests): ready, loading (a
 * comparison asked for and not yet shown), runs, tags (key: A's, keyB: B's), steps shown
 * (stepA, stepB), the cursor's step and the line that relates them (stepsLine), shared and
 * compared counts, k, histogram, mean overlap, chance level, the overlap line (overlapScale),
 * the ids listed, hovered and pinned point (index into ``data.ids``), the tooltip text, the
 * points drawn in each canvas and those outside the frame (outside), what colours them
 * (colourBy) and the legend ([{name, colour}]), the messages shown, whether A and B are
 * identical and the verdict that says so, the projection drawn ('pca', 'umap') and the one the
 * page asks for (projectionAsked), its residual, and an exported page's note on the steps it
 * holds (heldNote). ``close()`` stops following.
 */
export class ComparePanel {
  constructor({ data, tip, cursor = null, projection = null, ask = null }) {
    this.tip = tip;
    this.cursor = cursor;
    this.projectionChoice = projection;
    this.ask = ask;
    this.colourName = null; // the column that colours the points, kept from step to step
    this.pinnedId = null; // the pinned point's id, kept from step to step
    this.asking = false;
    this.pending = null; // a cursor step reached while an answer was awaited
    this.closed = false;
    this.state = { ready: false, loading: false, hovered: null, pinned: null, tooltip: '',
      drawn: [0, 0], outside: [0, 0], colourBy: 'overlap', legend: [] };
    this.element = el('section', { 'data-role': 'compare' });
    this.show(data);
    this.stops = [];
    if (cursor) this.stops.push(cursor.subscribe((step) => this.follow(step)));
    if (projection) this.stops.push(projection.subscribe(() => this.showProjection()));
    this.state.ready = true;
  }

  /** Stop following the cursor and the projection (another comparison replaces this one). */
  close() {
    for (const stop of this.stops) stop();
    this.stops = [];
    this.closed = true;
  }

  /** Show comparison ``data``: the colouring, the pinned point and the projection stay. */
  show(data) {
    this.data = data;
    const keyB = (data.b && data.b.key) || data.key;
    Object.assign(this.state, {
      a: data.a.run, b: data.b.run, key: data.key, keyB, stepA: data.a.step, stepB: data.b.step,
      shared: data.shared, compared: data.compared, k: data.k, histogram: data.histogram,
      meanOverlap: data.mean_overlap, chance: data.chance == null ? null : data.chance,
      listed: data.differ.map((d) => d.id), hovered: null, tooltip: '', drawn: [0, 0],
      outside: [0, 0], messages: data.messages.slice(), identical: !!data.identical,
      verdict: data.verdict || null, heldNote: data.held_note || null, overlapScale: null,
    });
    this.element.textContent = '';
    this.heading = el('h2');
    this.element.append(this.heading);
    this.element.append(el('div', { class: 'ls-hint', text: `Each dot is one input both saw; ` +
      `B's view is turned onto A's (orthogonal Procrustes). Coloured by neighbourhood overlap: ` +
      `of its ${data.k} nearest neighbours in the full embedding, how many are the same in both ` +
      "(green all, red none); or by A's metadata. It follows the step cursor and the page's " +
      'projection menu.' }));
    for (const m of data.messages) this.element.append(el('div', { class: 'ls-msg', 'data-role': 'compare-message', text: m }));
    if (data.verdict) this.element.append(el('div', { class: 'ls-msg', 'data-role': 'compare-verdict', text: data.verdict }));
    for (const m of data.notes) this.element.append(el('div', { class: 'ls-hint', text: m }));
    if (data.held_note) {
      this.element.append(el('div', { class: 'ls-msg', 'data-role': 'compare-held',
        text: `This page: ${data.held_note}` }));
    }
    this.views = compareViews(data);
    this.element.append(this.stepBar());
    this.stepsLine = el('div', { 'data-role': 'compare-steps', title: 'The snapshot each side ' +
      "shows: each run's newest at or before the step cursor's step (its first when it has " +
      'none that early)' });
    this.projectionNote = el('div', { class: 'ls-hint', 'data-role': 'compare-projection-note' });
    this.element.append(this.stepsLine, this.projectionNote);
    this.frames = null;
    this.canvases = null;
    if (this.views.length && data.ids.length) this.buildPictures();
    this.legend = el('div', { class: 'ls-legend', 'data-role': 'compare-legend' });
    const side = el('div', { class: 'ls-side' },
      [this.legend, this.summary(), this.overlapLine(), this.histogram(), this.differList()]);
    this.row = el('div', { class: 'ls-row' }, [...(this.canvases || []), side]);
    this.element.append(this.row);
    this.showSteps();
    this.showProjection(false);
    const pinned = this.pinnedId == null ? -1 : data.ids.indexOf(this.pinnedId);
    this.state.pinned = pinned >= 0 ? pinned : null;
    this.markPinnedRow();
    this.colourBy(data.columns.findIndex((c) => c.name === this.colourName));
  }

  stepBar() {
    const bar = el('div', { class: 'ls-bar' });
    const held = this.data.held_note ? ` This page holds some pairs of steps only: ${this.data.held_note}` : '';
    this.stepSelects = [['A', this.data.a], ['B', this.data.b]].map(([name, side]) => {
      const title = `The snapshot of ${name} shown: its newest at or before the step cursor. ` +
        `Pick a step to move the step cursor there (every panel follows).${held}`;
      const select = el('select', { 'aria-label': `step ${name}`, title },
        side.steps.map((s) => el('option', { value: s, text: `step ${s}` })));
      select.addEventListener('change', () => { if (this.cursor) this.cursor.set(+select.value); });
      bar.append(el('label', { title }, [`${name}: ${sideName(this.data, side)} `, select]));
      return select;
    });
    this.projectionShown = el('span', { 'data-role': 'compare-projection', title: 'The pictures: ' +
      "both runs' aligned PCA views, or both runs' aligned UMAP views (B's turned onto A's), as " +
      "the page's projection menu (in the embedding panel) picks" });
    bar.append(this.projectionShown);
    const colourTitle = 'What colours the points in both pictures: how many of its nearest ' +
      "neighbours a point keeps, or a metadata column of A's (with the embedding scatter's " +
      'colours and legend)';
    this.colourSelect = el('select', { 'aria-label': 'compare colour by', title: colourTitle,
      onchange: () => this.colourBy(+this.colourSelect.value) },
    [el('option', { value: OVERLAP_COLOURING, text: 'neighbourhood overlap' }),
      ...this.data.columns.map((c, i) => el('option', { value: i, text: c.name }))]);
    bar.append(el('label', { title: colourTitle }, ['colour both by ', this.colourSelect]));
    return bar;
  }

  /** The step menus and the line that says which snapshot each side shows for the cursor. */
  showSteps() {
    const d = this.data;
    const step = this.cursor ? this.cursor.step : null;
    [d.a, d.b].forEach((side, i) => { if (side.step != null) this.stepSelects[i].value = side.step; });
    let text = '';
    if (step != null && d.a.step != null && d.b.step != null) {
      text = d.a.step === d.b.step ? `A and B at step ${d.a.step}${relation(d.a.step, step)}`
        : `A at step ${d.a.step}${relation(d.a.step, step)}; ` +
          `B at step ${d.b.step}${relation(d.b.step, step)}`;
      if (d.a.step === step && d.b.step === step) text += ", the step cursor's";
      const wanted = [d.a.steps, d.b.steps].map((steps) => steps[shownIndex(steps, step)]);
      if (wanted[0] !== d.a.step || wanted[1] !== d.b.step) {
        text += `: this page holds no comparison of A's step ${wanted[0]} with B's step ` +
          `${wanted[1]}, so it shows the newest it holds (see the note above)`;
      }
    }
    this.stepsLine.textContent = text;
    Object.assign(this.state, { cursor: step, stepsLine: text, stepA: d.a.step, stepB: d.b.step });
  }

  /** Follow the step cursor to ``step``: ask for the comparison there unless it is shown. */
  follow(step) {
    if (this.closed) return;
    if (this.asking) {
      this.pending = step;
      return;
    }
    const d = this.data;
    const wanted = [d.a.steps, d.b.steps].map((steps) => steps[shownIndex(steps, step)]);
    const missing = !d.a.steps.length || !d.b.steps.length; // a run without the tag: said once
    if (!this.ask || missing || (wanted[0] === d.a.step && wanted[1] === d.b.step)) {
      this.showSteps();
      return;
    }
    this.fetchAt(step);
  }

  async fetchAt(step) {
    this.asking = true;
    this.state.loading = true;
    let data = null;
    try {
      data = await this.ask(step);
    } catch (error) {
      this.element.insertBefore(el('div', { class: 'ls-msg', 'data-role': 'compare-message',
        text: `the comparison at step ${step} could not be fetched: ${error}` }), this.stepsLine);
    }
    this.asking = false;
    if (this.closed) return;
    if (data && data !== this.data) this.show(data); else this.showSteps();
    const next = this.pending;
    this.pending = null;
    if (next != null) this.follow(next);
    this.state.loading = this.asking;
  }

  /**
   * Draw the two runs in the page's projection (PCA when they do not both have it, said so):
   * A's view and B's turned onto it; the pinned point and the colours stay. ``draw``: draw now.
   */
  showProjection(draw = true) {
    const asked = this.projectionChoice ? this.projectionChoice.name : 'pca';
    const view = this.views.find((v) => v.name === asked) || this.views[0];
    this.state.projectionAsked = asked;
    const { a, b, key, keyB } = this.state;
    this.heading.textContent = (keyB === key ? `Compare ${a} (A) with ${b} (B): ${key}`
      : `Compare ${a} ${key} (A) with ${b} ${keyB} (B)`) + (view ? ` (aligned ${view.label})` : '');
    const missing = view && view.name !== asked;
    this.projectionNote.textContent = missing ? `The page shows ${asked.toUpperCase()}; not both ` +
      `snapshots have an aligned ${asked.toUpperCase()} view, so the comparison shows ${view.label}.` : '';
    if (!view || !this.canvases) {
      this.state.projection = null;
      return;
    }
    this.projectionShown.textContent = `projection ${view.label}`;
    this.frames = [decodeFloat32(view.xy_a), decodeFloat32(view.xy_b)];
    this.frame = view.frame;
    const mapping = frameMapping(view.frame, COMPARE_SIDE, COMPARE_SIDE);
    this.positions = this.frames.map((frame) =>
      screenPositions({ ids: this.data.ids, frames: [frame], bounds: view.frame }, 0, mapping));
    const [x0, x1, y0, y1] = view.frame;
    this.state.outside = this.frames.map((f) => {
      let out = 0;
      for (let i = 0; i < f.length; i += 2) if (f[i] < x0 || f[i] > x1 || f[i + 1] < y0 || f[i + 1] > y1) out++;
      return out;
    });
    Object.assign(this.state, { projection: view.name, residual: view.residual });
    if (draw) this.draw();
  }

  buildPictures() {
    this.canvases = [];
    this.contexts = [];
    ['A', 'B'].forEach((name, side) => {
      const canvas = el('canvas', { 'data-role': `compare-${name}`, class: 'ls-pick' });
      this.contexts.push(setupCanvas(canvas, COMPARE_SIDE, COMPARE_SIDE));
      canvas.addEventListener('mousemove', (ev) => this.hover(this.pointAt(side, ev), ev));
      canvas.addEventListener('mouseleave', () => this.hover(null, null));
      canvas.addEventListener('click', (ev) => this.pin(this.pointAt(side, ev)));
      const run = this.data[name.toLowerCase()];
      this.canvases.push(el('div', {}, [el('div', { text: `${name}: ${sideName(this.data, run)}, step ${run.step}`,
        title: `${name}: the run (and tag) and the step of the snapshot drawn` }), canvas]));
    });
    this.count = this.data.ids.length;
  }

  summary() {
    const d = this.data;
    const lines = [[`${d.shared.toLocaleString()} shared points` +
      (d.compared < d.shared ? `, ${d.compared.toLocaleString()} compared` : '') +
      ` (A ${d.a.points.toLocaleString()}, B ${d.b.points.toLocaleString()})`,
    'The points both snapshots hold (matched by id), of the points each holds']];
    if (d.mean_overlap != null) {
      const times = d.chance ? ` (${(d.mean_overlap / d.chance).toFixed(1)} times chance)` : '';
      lines.push([`mean overlap ${percent(d.mean_overlap)} of ${d.k} neighbours${times}`,
        `Of each point's ${d.k} nearest neighbours in A's full embedding, the share that are ` +
        'also among its ' + `${d.k} nearest in B's, averaged over the points` +
        (d.chance ? `; chance: ${d.k}/${d.compared - 1} = ${percent(d.chance)}` : '')]);
    }
    if (d.identical) lines.push(['A and B are identical', 'Every point keeps its neighbours and the views coincide']);
    return el('div', { 'data-role': 'compare-summary' },
      lines.map(([text, title]) => el('div', { text, title })));
  }

  /** How to read the mean overlap: good, bad, 100%, chance (none without an overlap). */
  overlapLine() {
    const d = this.data;
    if (d.mean_overlap == null || d.chance == null) return el('div');
    const lines = overlapScale(d.k, d.compared, d.chance);
    this.state.overlapScale = lines.join(' ');
    return el('div', { class: 'ls-hint', 'data-role': 'compare-overlap-scale',
      title: 'How to read the mean overlap' }, lines.map((text) => el('div', { text })));
  }

  histogram() {
    const counts = this.data.histogram;
    if (!counts) return el('div');
    const most = Math.max(1, ...counts);
    const bars = counts.map((c, i) => el('div', { class: 'ls-hbar', title: `${c} points keep ${i} of ${this.data.k}` }, [
      el('div', { 'data-count': i, class: 'ls-hcount', text: String(c) }),
      el('div', { style: `height:${Math.round((60 * c) / most)}px;background:${overlapColour(i / this.data.k)}` }),
      el('div', { class: 'ls-hlabel', text: String(i) })]));
    return el('div', {}, [el('h2', { text: `Neighbours in common (of ${this.data.k})`,
      title: `Points by how many of their ${this.data.k} nearest neighbours A and B share` }),
    el('div', { class: 'ls-hist', 'data-role': 'compare-histogram' }, bars)]);
  }

  differList() {
    const d = this.data;
    if (!d.overlap) return el('div');
    if (!d.differ.length) {
      return el('div', {}, [el('h2', { text: 'Neighbourhoods that differ most' }),
        el('div', { 'data-role': 'compare-differ-none', text: `none: every point keeps its ${d.k} nearest neighbours`,
          title: 'No point has a nearest neighbour in A that is not one in B' })]);
    }
    const names = d.columns.map((c) => c.name);
    const heads = [['id', "The point's id"],
      ['overlap', `Of its ${d.k} nearest neighbours in A, how many are among its ${d.k} nearest in B`],
      ...names.map((n) => [n, `A's metadata column ${n}`])];
    const rows = d.differ.map((p) => el('tr', { class: 'ls-click', 'data-index': p.index, onclick: () => this.pin(p.index) },
      [p.id, `${p.overlap}/${d.k}`, ...names.map((n) => String(p.metadata[n]))].map((t) => el('td', { text: t }))));
    return el('div', {}, [el('h2', { text: 'Neighbourhoods that differ most' }),
      el('div', { class: 'ls-movers' }, el('table', { 'data-role': 'compare-differ' }, [
        el('tr', {}, heads.map(([t, title]) => el('th', { text: t, title }))), ...rows]))]);
  }

  colourBy(index) {
    const n = this.data.ids.length;
    const column = this.data.columns[index] || null;
    let scheme;
    if (column) {
      scheme = colourScheme(column, n);
      this.state.legend = showLegend(this.legend, column, scheme);
    } else {
      const k = this.data.k, overlap = this.data.overlap;
      const colours = Array.from({ length: k + 1 }, (_, i) => overlapColour(i / k)).concat([PLAIN_COLOUR]);
      scheme = { colours, bucket: Int32Array.from({ length: n }, (_, i) => (overlap ? overlap[i] : k + 1)) };
      this.state.legend = this.overlapLegend();
    }
    this.colourSelect.value = column ? index : OVERLAP_COLOURING;
    this.colourName = column ? column.name : null;
    this.state.colourBy = column ? column.name : 'overlap';
    this.colours = scheme.colours;
    this.groups = groupByColour(scheme.bucket, scheme.colours.length);
    this.draw();
  }

  /** The legend of the overlap colours: none, half and all of the k neighbours in common. */
  overlapLegend() {
    const k = this.data.k;
    this.legend.textContent = '';
    if (!this.data.overlap) return [];
    this.legend.title = `The colours: how many of its ${k} nearest neighbours a point keeps`;
    const shown = [[0, `0 of ${k} in common`], [Math.round(k / 2), `${Math.round(k / 2)}`],
      [k, `all ${k}`]].map(([i, name]) => ({ name, colour: overlapColour(i / k) }));
    for (const s of shown) {
      this.legend.append(el('span', {}, [el('span', { class: 'ls-swatch', style: `background:${s.colour}` }), s.name]));
    }
    return shown;
  }

  draw() {
    if (!this.frames) return;
    this.contexts.forEach((ctx, side) => {
      ctx.clearRect(0, 0, COMPARE_SIDE, COMPARE_SIDE);
      const pos = this.positions[side];
      this.state.drawn[side] = drawPoints(ctx, pos, this.groups, this.colours, COMPARE_POINT);
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

  /** Select point ``k`` (or none) in both pictures and in the list; it stays from step to step. */
  pin(k) {
    this.state.pinned = k;
    this.pinnedId = k == null ? null : this.data.ids[k];
    this.markPinnedRow();
    this.draw();
  }

  markPinnedRow() {
    for (const tr of this.element.querySelectorAll('tr[data-index]')) {
      tr.style.background = +tr.getAttribute('data-index') === this.state.pinned ? '#fff3e0' : '';
    }
  }
}
