// "side by side": a small header choice that opens the small multiples (multiples.js) of the run
// shown (the reference) and the other runs ticked, under the step cursor's line. The runs table,
// where several rows are chosen, opens the same SmallMultiples; this choice is the simplest way
// to reach them without it. Closed, it takes one line of the header, as the other choices do.

import { el } from './dom.js';
import { SmallMultiples } from './multiples.js';

/**
 * A list of tick boxes of the runs of ``source`` (``setRuns``) but the run shown; ticking runs
 * shows their small multiples in ``box`` (``multiples``: the SmallMultiples shown, or null).
 */
export class SideBySideChoice {
  constructor({ source, tip }) {
    this.multiplesView = new SmallMultiples({ source, tip });
    this.box = this.multiplesView.box;
    this.count = el('span');
    this.list = el('div', { 'data-role': 'side-by-side-runs', style: 'position:absolute;' +
      'z-index:5;background:#fff;border:1px solid #e0e0e0;padding:4px 8px;max-height:240px;' +
      'overflow:auto;white-space:nowrap' });
    this.details = el('details', { style: 'position:relative;display:inline-block' },
      [el('summary', { 'aria-label': 'side by side', style: 'cursor:pointer' },
        ['side by side', this.count]), this.list]);
    this.runNames = [];
    this.shown = { run: null, cursor: null, projection: null };
  }

  /** The header's part of the choice. */
  labels() {
    this.details.title = 'Other runs to show beside this run, one small panel each, on the ids ' +
      'they all share, turned onto this run';
    return [this.details];
  }

  /** The runs that can be picked. */
  setRuns(names) { this.runNames = names; }

  /** The choice for ``run`` (the reference), with the page's step ``cursor`` and ``projection``. */
  showRun(run, cursor = null, projection = null) {
    this.multiplesView.close();
    this.shown = { run, cursor, projection };
    this.order = []; // the runs ticked, in the order ticked
    this.count.textContent = '';
    this.list.textContent = '';
    this.boxes = this.runNames.filter((n) => n !== run).map((name) => {
      const box = el('input', { type: 'checkbox', value: name, 'aria-label': `side by side ${name}`,
        title: `Show ${name} beside this run, in the order ticked` });
      box.addEventListener('change', () => {
        this.order = box.checked ? [...this.order, name] : this.order.filter((n) => n !== name);
        this.open(this.order);
      });
      this.list.append(el('label', { style: 'display:block' }, [box, ` ${name}`]));
      return box;
    });
  }

  /** The small multiples shown (their ``state`` for tests), or null. */
  get multiples() { return this.multiplesView.state.ready ? this.multiplesView : null; }

  /** Show the run shown beside runs ``names``, in their order (ticking them); none closes them. */
  open(names) {
    const known = names.filter((n) => this.boxes.some((b) => b.value === n));
    for (const box of this.boxes) box.checked = known.includes(box.value);
    this.order = known;
    this.count.textContent = known.length ? ` (${known.length})` : '';
    if (!known.length) {
      this.multiplesView.close();
      return null;
    }
    const { run, cursor, projection } = this.shown;
    return this.multiplesView.show([run, ...known], cursor, projection);
  }
}
