// "side by side": a small header choice that opens the small multiples (multiples.js) of the run
// shown (the reference) and the other runs picked, under the step cursor's line. The runs table,
// where several rows are chosen, opens the same SmallMultiples; this choice is the simplest way
// to reach them without it.

import { el } from './dom.js';
import { SmallMultiples } from './multiples.js';

/**
 * A multi-select of the runs of ``source`` (``setRuns``) beside the run shown; picking runs shows
 * their small multiples in ``box`` (``multiples``: the SmallMultiples shown, or null).
 */
export class SideBySideChoice {
  constructor({ source, tip }) {
    this.multiplesView = new SmallMultiples({ source, tip });
    this.box = this.multiplesView.box;
    this.others = el('select', { multiple: '', size: '3', 'aria-label': 'side by side',
      onchange: () => this.open() });
    this.runNames = [];
    this.shown = { run: null, cursor: null, projection: null };
  }

  /** The header's label of the choice. */
  labels() {
    return [el('label', { title: 'Other runs to show beside this run, one small panel each, on ' +
      'the ids they all share, turned onto this run (ctrl- or shift-click picks several)' },
    ['side by side ', this.others])];
  }

  /** The runs that can be picked. */
  setRuns(names) { this.runNames = names; }

  /** The choice for ``run`` (the reference), with the page's step ``cursor`` and ``projection``. */
  showRun(run, cursor = null, projection = null) {
    this.multiplesView.close();
    this.shown = { run, cursor, projection };
    this.others.textContent = '';
    this.others.append(...this.runNames.filter((n) => n !== run)
      .map((n) => el('option', { value: n, text: n })));
  }

  /** The small multiples shown (their ``state`` for tests), or null. */
  get multiples() { return this.multiplesView.state.ready ? this.multiplesView : null; }

  /** Show the run shown beside ``names``, in their order (the runs picked, in menu order, by default). */
  open(names) {
    if (names !== undefined) {
      for (const option of this.others.options) option.selected = names.includes(option.value);
    }
    const selected = [...this.others.selectedOptions].map((o) => o.value);
    const picked = names === undefined ? selected : names.filter((n) => selected.includes(n));
    if (!picked.length) {
      this.multiplesView.close();
      return null;
    }
    const { run, cursor, projection } = this.shown;
    return this.multiplesView.show([run, ...picked], cursor, projection);
  }
}
