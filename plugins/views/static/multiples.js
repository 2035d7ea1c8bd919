// Small multiples of the runs chosen in the runs table (a placeholder until the module that draws
// them lands: it keeps the interface, a box and show/close, and draws nothing).

import { el } from './dom.js';

/** Each chosen run's embedding at one step cursor, side by side (this placeholder draws none). */
export class SmallMultiples {
  constructor({ source, tip }) {
    this.source = source;
    this.tip = tip;
    this.box = el('div');
  }

  /** Show ``runNames`` (in the table's order) at ``cursor``'s step in ``projection``. */
  show(runNames, cursor, projection) {} // eslint-disable-line no-unused-vars

  /** Hide the multiples. */
  close() {}
}
