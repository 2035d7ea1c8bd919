// The scatter's bar: tag and colour choices, play/pause, the step slider and label, trails.

import { el } from './dom.js';

/**
 * The bar for the embeddings ``keys``; ``on`` is told what the user does: ``tag(index)``,
 * ``colour(index)``, ``playPause()``, ``seek(position)`` (the slider), ``trails()``.
 */
export class ScatterBar {
  constructor(keys, on) {
    this.tag = el('select', { 'aria-label': 'tag', onchange: () => on.tag(+this.tag.value) },
      keys.map((key, i) => el('option', { value: i, text: key })));
    this.colour = el('select', { 'aria-label': 'colour by', onchange: () => on.colour(+this.colour.value) });
    this.play = el('button', { text: '▶ play', onclick: () => on.playPause() });
    this.slider = el('input', { type: 'range', min: 0, max: 0, step: 'any', value: 0, 'aria-label': 'step',
      oninput: () => on.seek(+this.slider.value) });
    this.slider.style.width = '260px';
    this.step = el('span');
    this.trails = el('input', { type: 'checkbox', onchange: () => on.trails() });
    this.element = el('div', { class: 'ls-bar' }, [
      el('label', {}, ['tag ', this.tag]), el('label', {}, ['colour by ', this.colour]),
      this.play, this.slider, this.step, el('label', {}, [this.trails, ' trails']),
    ]);
  }

  /** Offer embedding ``e``'s columns to colour by (or none) and its snapshots on the slider. */
  showEmbedding(e) {
    this.colour.textContent = '';
    e.columns.forEach((c, i) => this.colour.append(el('option', { value: i, text: c.name })));
    if (!e.columns.length) this.colour.append(el('option', { value: -1, text: '(none)' }));
    this.slider.max = e.steps.length - 1;
  }

  /** Show fractional snapshot index ``position`` of ``e``: the slider, the step and its spread. */
  showPosition(e, position) {
    this.slider.value = position;
    const i = Math.round(position);
    const spread = e.spreads ? e.spreads[i] : null;
    this.step.textContent = `step ${e.steps[i]} (${i + 1}/${e.steps.length})` +
      (spread != null && e.units === 'spread' ? `, spread ${Number(spread).toPrecision(3)}` : '');
  }

  showPlaying(playing) {
    this.play.textContent = playing ? '❚❚ pause' : '▶ play';
  }

  get colourIndex() { return +this.colour.value; }

  get trailsShown() { return this.trails.checked; }
}
