// The embedding-evolution panel: the scatter with its slider, play, trails, hover, pin, movers.

import { colourScheme } from './colours.js';
import { shownIndex } from './cursor.js';
import { el, panelSection } from './dom.js';
import { showLegend } from './legend.js';
import { prepareEmbedding } from './model.js';
import { MoversList } from './movers.js';
import { PointCard } from './point_card.js';
import { ScatterBar } from './scatter_bar.js';
import { ScatterCanvas } from './scatter_canvas.js';

const SECONDS_PER_SNAPSHOT = 0.8;
const SCATTER_WIDTH = 640, SCATTER_HEIGHT = 480;
const PIN_HINT = 'Click a dot to pin it: its path, ■ at its start.';
// What each projection's picture means (one without its own words gets projectionHint's).
const PROJECTION_HINTS = {
  pca: 'Each dot is one input at this step. Good: the clusters of each label pull apart ' +
    'over the steps; bad: everything folds into one blob or a line (collapse). ' + PIN_HINT,
  umap: 'Each dot is one input at this step, placed by aligned UMAP: dots near each other had ' +
    'near embeddings (the distances between clusters mean less than in PCA). Good: the ' +
    'clusters of each label pull apart over the steps; bad: they melt into one another ' +
    '(collapse). ' + PIN_HINT,
};

/** The hint of projection ``name`` (``label``: how the page names it). */
function projectionHint(name, label) {
  return PROJECTION_HINTS[name] || `Each dot is one input at this step, placed by aligned ${label}. ` +
    'Good: the clusters of each label pull apart over the steps. ' + PIN_HINT;
}

/**
 * The projections embedding ``e`` (prepared) can be shown in: PCA (``e`` itself), then each of
 * its ``projections`` (aligned UMAP, ...), as [{name, label}].
 */
export function projectionChoices(e) {
  return [{ name: 'pca', label: 'PCA' },
    ...(e.projections || []).map((p) => ({ name: p.name, label: p.label || p.name.toUpperCase() }))];
}

/**
 * Embedding ``e`` (prepared) in projection ``name``: ``e`` itself for PCA, else ``e`` with the
 * projection's snapshots (steps, frames, spreads, frame, fitted and points per snapshot).
 */
export function inProjection(e, name) {
  const p = name === 'pca' ? null : (e.projections || []).find((q) => q.name === name);
  if (!p) return e;
  return prepareEmbedding({ ...e, projection: p.name, label: p.label, steps: p.steps, xy: p.xy,
    spreads: p.spreads, frame: p.frame, fitted: p.fitted, pointsAt: p.points });
}

/** The renderer the page asks for (``?renderer=canvas`` in its address), else WebGL. */
function askedRenderer() {
  const asked = new URLSearchParams(window.location.search).get('renderer');
  return asked === 'canvas' ? 'canvas' : 'webgl';
}

/**
 * The embeddings of a view (prepared: frames decoded) in one section. It writes what it shows
 * into the shared ``state`` (key, points, steps, position, playing, frames, drawnPoints,
 * renderer, hovered, tooltip, pinned, colourBy, legend, movers). It follows the step ``cursor``
 * (the newest snapshot at or before its step, else the first) and moves it: its slider and play
 * set it to the snapshot's step. Its projection menu is the page's: it sets ``projection`` (a
 * ProjectionChoice, when given), which the comparison follows. Its parts: the ``bar`` (ScatterBar), the picture (``scatter``, a
 * ScatterCanvas: canvases, renderer, positions), the hovered and pinned point's ``card``
 * (PointCard), the movers.
 */
export class EmbeddingPanel {
  constructor({ view, embeddings, state, cursor, tip, projection = null }) {
    this.embeddings = embeddings;
    this.state = state;
    this.cursor = cursor;
    this.projectionChoice = projection;
    this.element = panelSection(view, 'embeddings', {
      title: 'Embedding evolution (aligned PCA)', has: embeddings.length > 0,
      empty: 'No embedding snapshots with aligned PCA coordinates.',
      hint: projectionHint('pca', 'PCA') });
    this.title = this.element.querySelector('h2');
    this.hint = this.element.querySelector('[data-role="hint-embeddings"]');
    this.projection = 'pca'; // the projection asked for: kept from key to key where it can be
    if (!embeddings.length) return;
    this.build(tip);
    this.selectTag(0);
    cursor.subscribe((step, from) => { if (from !== this) this.goToStep(step); });
  }

  build(tip) {
    this.bar = new ScatterBar(this.embeddings.map((e) => e.key), {
      tag: (i) => this.selectTag(i),
      projection: (name) => this.showProjection(name),
      colour: (i) => this.colourBy(i),
      playPause: () => (this.state.playing ? this.pause() : this.play()),
      seek: (p) => { this.pause(); this.setPosition(p); },
      trails: () => this.draw(),
    });
    this.element.append(this.bar.element);
    this.legend = el('div', { class: 'ls-legend' });
    this.card = new PointCard(tip);
    this.note = el('div', { style: 'color:#616161', 'data-role': 'points-note',
      title: 'The points drawn (each one input, the same ones in every snapshot, matched by id) ' +
        'and the snapshots of this embedding' });
    this.fitted = el('div', { style: 'color:#616161', 'data-role': 'projection-note',
      title: 'The projection was fitted on some of the points only (they cost it time); each ' +
        'of the others is placed by its nearest fitted points' });
    this.movers = new MoversList((k) => this.pin(k), () => this.findMovers());
    const side = el('div', { class: 'ls-side' },
      [this.note, this.fitted, this.legend, this.card.element, ...this.movers.nodes]);
    this.scatter = this.newScatter(askedRenderer());
    this.element.append(el('div', { class: 'ls-row' }, [this.scatter.element, side]));
  }

  /**
   * Draw with ``name`` ('webgl' where the browser has it, or 'canvas') and the trails with
   * ``trails`` ('auto', 'webgl' or 'canvas': see ScatterCanvas); ``state.renderer`` and
   * ``state.trailsRenderer`` say which draw.
   */
  setRenderer(name, trails = 'auto') {
    const old = this.scatter;
    this.scatter = this.newScatter(name, trails);
    old.element.replaceWith(this.scatter.element);
    if (this.current) this.colourBy(this.bar.colourIndex);
  }

  newScatter(name, trails = 'auto') {
    const lost = () => this.setRenderer('canvas');
    const scatter = new ScatterCanvas(SCATTER_WIDTH, SCATTER_HEIGHT, name, lost, trails);
    scatter.canvas.addEventListener('mousemove', (ev) => this.onHover(ev));
    scatter.canvas.addEventListener('mouseleave', () => { this.state.hovered = null; this.card.showTip(null); this.draw(); });
    scatter.canvas.addEventListener('click', (ev) => this.pin(this.pointAt(ev)));
    this.state.renderer = scatter.renderer;
    this.state.trailsRenderer = scatter.trailsRenderer;
    return scatter;
  }

  // What the view shows tests and the benchmark (LearnscopeView's getters).
  get canvas() { return this.scatter.canvas; }
  get ctx() { return this.scatter.front; }
  get pos() { return this.current && this.scatter.positions(this.current, this.state.position); }
  get width() { return this.scatter.width; }
  get height() { return this.scatter.height; }

  selectTag(index) {
    this.pause();
    const e = this.embeddings[index];
    const choices = projectionChoices(e);
    const name = choices.some((c) => c.name === this.projection) ? this.projection : 'pca';
    this.views = new Map(); // the key in each projection shown so far, by name
    this.current = null;
    Object.assign(this.state, { key: e.key, points: e.ids.length, pointsTotal: e.points_total,
      hovered: null, pinned: null, movers: [] });
    this.bar.showEmbedding(e, choices, name);
    this.card.showEmbedding(e);
    this.tagIndex = index;
    this.showProjection(name, false);
    this.colourBy(e.columns.length ? 0 : -1);
  }

  /**
   * Show the key in projection ``name`` ('pca', 'umap'; one the key has): the same points,
   * colours, pinned point, trails and step cursor, the snapshot shown being the projection's
   * newest at or before the cursor; movers listed are found again in it, between the same
   * steps where it has them. ``draw``: draw now (false while the key is being set up).
   */
  showProjection(name, draw = true) {
    this.pause();
    const base = this.embeddings[this.tagIndex];
    if (!this.views.has(name)) this.views.set(name, inProjection(base, name));
    const e = this.views.get(name);
    const before = this.current && this.movers.chosenSteps(this.current.steps);
    const movers = this.state.movers.length > 0;
    const label = name === 'pca' ? 'PCA' : e.label || name.toUpperCase();
    this.current = e;
    this.projection = name;
    Object.assign(this.state, { projection: name, steps: e.steps, hovered: null });
    if (this.projectionChoice) this.projectionChoice.set(name, this);
    this.bar.showSteps(e, name);
    this.movers.showSteps(e.steps, e.neighbours, before && before.map((step) => shownIndex(e.steps, step)));
    const n = e.ids.length;
    this.note.textContent = `${n.toLocaleString()} points` +
      (e.points_total > n ? ` of ${e.points_total.toLocaleString()} (a fixed subsample by id)` : '') +
      `, ${e.steps.length} snapshot${e.steps.length === 1 ? '' : 's'}` +
      (name === 'pca' ? '' : ` with ${label}`);
    this.title.textContent = `Embedding evolution (aligned ${label})`;
    this.hint.textContent = projectionHint(name, label);
    this.label = label;
    if (this.cursor.step == null) this.setPosition(e.steps.length - 1, false, draw);
    else this.goToStep(this.cursor.step, draw);
    if (movers) this.findMovers();
  }
  colourBy(index) {
    const e = this.current;
    const column = e.columns[index] || null;
    this.state.colourBy = column ? column.name : null;
    const scheme = colourScheme(column, e.ids.length);
    this.state.legend = showLegend(this.legend, column, scheme);
    this.scatter.setColours(scheme.bucket, scheme.colours);
    this.draw();
  }

  /**
   * Show the fractional snapshot index ``p`` (clamped); with ``move`` (the user's slider, play)
   * the cursor goes to the step of the snapshot shown when that changed.
   */
  setPosition(p, move = true, draw = true) {
    const e = this.current;
    const last = e.steps.length - 1;
    this.state.position = Math.max(0, Math.min(last, p));
    const i = Math.round(this.state.position);
    const step = e.steps[i];
    if (move && step !== this.cursor.step) this.cursor.set(step, this);
    this.bar.showPosition(e, this.state.position, this.cursor.step);
    this.showFitted(e, i);
    if (draw) this.draw();
  }

  /** Say how many points snapshot ``i`` of ``e``'s projection was fitted on, when not all. */
  showFitted(e, i) {
    const fitted = e.fitted ? e.fitted[i] : null;
    const points = e.pointsAt ? e.pointsAt[i] : null;
    const text = fitted != null && points != null ? `${this.label} fitted on ` +
      `${fitted.toLocaleString()} of ${points.toLocaleString()} points; the others placed by ` +
      'their nearest fitted points' : '';
    if (this.fitted.textContent !== text) this.fitted.textContent = text;
    this.fitted.style.display = text ? '' : 'none';
  }

  /** Show the newest snapshot at or before trainer step ``step`` (else the first). */
  goToStep(step, draw = true) {
    this.pause();
    this.setPosition(shownIndex(this.current.steps, step), false, draw);
  }

  play() {
    if (!this.current || this.current.steps.length < 2) return;
    this.state.playing = true;
    this.bar.showPlaying(true);
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
    if (this.bar) this.bar.showPlaying(false);
  }

  draw() {
    if (!this.scatter || !this.current) return;
    const { pinned, hovered } = this.state;
    const { drawn, pathStart } = this.scatter.draw(this.current, this.state.position,
      { trails: this.bar.trailsShown, pinned, hovered });
    this.state.drawnPoints = drawn;
    this.state.pathStart = pathStart;
  }

  pointAt(ev) {
    return this.scatter.pointAt(ev, this.current, this.state.position);
  }

  onHover(ev) {
    const k = this.pointAt(ev);
    this.state.hovered = k;
    this.state.tooltip = this.card.showTip(k, ev);
    if (!this.state.playing) this.draw();
  }

  pin(k) {
    this.state.pinned = k;
    this.card.showPinned(k, () => this.pin(null));
    this.draw();
  }

  findMovers() {
    this.state.movers = this.movers.find(this.current);
  }
}
