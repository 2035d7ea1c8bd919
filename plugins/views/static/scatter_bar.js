// The scatter's bar: tag and colour choices, play/pause, the snapshot slider and label, trails.

import { relation } from './cursor.js';
import { el } from './dom.js';

const SPREAD_TITLE = "spread: how far this snapshot's points lie from their centre (the " +
  "root-mean-square distance, in the embedding's own units). The scatter is drawn in units of " +
  'it, so the picture shows the shape; a spread that grows or shrinks over the steps is the ' +
  'embeddings growing or shrinking.';

/**
 * The bar for the embeddings ``keys``; ``on`` is told what the user does: ``tag(index)``,
 * ``projection(name)``, ``colour(index)``, ``playPause()``, ``seek(position)`` (the slider),
 * ``trails()``. The projection choice shows only for a key with more than one.
 */
export class ScatterBar {
  constructor(keys, on) {
    this.tag = el('select', { 'aria-label': 'tag', onchange: () => on.tag(+this.tag.value),
      title: 'The embedding shown: the tag of an EmbeddingProjector and the loop it captured ' +
        '(module/stage)' },
    keys.map((key, i) => el('option', { value: i, text: key })));
    this.projection = el('select', { 'aria-label': 'projection',
      onchange: () => on.projection(this.projection.value),
      title: 'The picture of the points: aligned PCA (distances and directions of the ' +
        'embedding, flattened) or aligned UMAP (neighbours kept near); both follow the same ' +
        'step cursor, points and colours' });
    this.projectionLabel = el('label', { title: this.projection.title, 'data-role': 'projection-choice' },
      ['projection ', this.projection]);
    this.colour = el('select', { 'aria-label': 'colour by', onchange: () => on.colour(+this.colour.value),
      title: 'The metadata column that colours the points (a legend for categories, a colour ' +
        'bar for numbers)' });
    this.play = el('button', { text: '▶ play', onclick: () => on.playPause(),
      title: 'Play the snapshots in turn, the points gliding between them (it moves the step cursor)' });
    this.slider = el('input', { type: 'range', min: 0, max: 0, step: 'any', value: 0, 'aria-label': 'step',
      title: "The snapshot shown: drag through this embedding's snapshots (it moves the step cursor)",
      oninput: () => on.seek(+this.slider.value) });
    this.slider.style.width = '260px';
    this.step = el('span', { 'data-role': 'snapshot-step',
      title: 'The snapshot shown: its trainer step, its place among the snapshots, and how it ' +
        'relates to the step cursor' });
    this.comma = el('span');
    this.spread = el('span', { class: 'ls-help', 'data-role': 'spread', title: SPREAD_TITLE });
    this.trails = el('input', { type: 'checkbox', onchange: () => on.trails(),
      title: 'Draw a short trail behind each point: where it was over the last snapshots' });
    this.element = el('div', { class: 'ls-bar' }, [
      el('label', {}, ['embedding ', this.tag]), this.projectionLabel,
      el('label', {}, ['colour by ', this.colour]),
      this.play, this.slider, el('span', {}, [this.step, this.comma, this.spread]),
      el('label', { title: this.trails.title }, [this.trails, ' trails']),
    ]);
  }

  /**
   * Offer embedding ``e``'s columns to colour by (or none), its projections ``choices``
   * ([{name, label}], ``name`` chosen; no choice for one) and its snapshots on the slider.
   */
  showEmbedding(e, choices = [], name = 'pca') {
    this.colour.textContent = '';
    e.columns.forEach((c, i) => this.colour.append(el('option', { value: i, text: c.name })));
    if (!e.columns.length) this.colour.append(el('option', { value: -1, text: '(none)' }));
    this.projection.textContent = '';
    for (const c of choices) this.projection.append(el('option', { value: c.name, text: c.label }));
    this.projectionLabel.style.display = choices.length > 1 ? '' : 'none';
    this.showSteps(e, name);
  }

  /** Put the snapshots of ``e`` (in projection ``name``) on the slider. */
  showSteps(e, name = 'pca') {
    if (this.projection.value !== name && this.projection.options.length) this.projection.value = name;
    this.slider.max = e.steps.length - 1;
  }

  /**
   * Show fractional snapshot index ``position`` of ``e``: the slider, the snapshot's step (and
   * how it relates to the cursor's ``cursorStep``) and its spread.
   */
  showPosition(e, position, cursorStep) {
    this.slider.value = position;
    const i = Math.round(position);
    const spread = e.spreads ? e.spreads[i] : null;
    this.step.textContent = `snapshot of step ${e.steps[i]} (${i + 1}/${e.steps.length})` +
      relation(e.steps[i], cursorStep);
    const shown = spread != null && e.units === 'spread';
    this.comma.textContent = shown ? ', ' : '';
    this.spread.textContent = shown ? `spread ${Number(spread).toPrecision(3)}` : '';
  }

  showPlaying(playing) {
    this.play.textContent = playing ? '❚❚ pause' : '▶ play';
  }

  get colourIndex() { return +this.colour.value; }

  get trailsShown() { return this.trails.checked; }
}
