// The comparison's choices in the view's header ("compare with" a run, its "tag", "with tag"
// B's tag) and the comparison panel they open (compare.js), in a box of its own under the step
// cursor's line: it follows the run's step cursor and projection menu.

import { ComparePanel } from './compare.js';
import { el } from './dom.js';

/** ``select``'s options: ``keys`` (and ``value`` when missing), ``value`` chosen. */
function setChoices(select, keys, value) {
  select.textContent = '';
  const all = value && !keys.includes(value) ? [...keys, value] : keys;
  select.append(...(all.length ? all : ['']).map((k) => el('option', { value: k, text: k || '(same tag)' })));
  select.value = value;
}

/**
 * The choices over the runs of ``source`` (``setRuns``) and the comparison they open in ``box``;
 * ``tip`` is the view's tooltip. ``panel`` is the comparison shown (its ``state`` for tests), or null.
 */
export class CompareChooser {
  constructor({ source, tip }) {
    this.source = source;
    this.tip = tip;
    this.other = el('select', { 'aria-label': 'compare with', onchange: () => this.open() });
    this.key = el('select', { 'aria-label': 'compare tag', onchange: () => this.open() });
    this.keyB = el('select', { 'aria-label': 'compare with tag',
      onchange: () => this.open(undefined, undefined, this.keyB.value) });
    this.box = el('div');
    this.panel = null;
    this.ticket = 0; // the newest comparison asked for; older answers are dropped
    this.runNames = [];
    this.shown = { run: null, view: null, cursor: null, projection: null }; // A: the run shown
  }

  /** The header's labels of the choices. */
  labels() {
    return [el('label', { title: 'Another run (or this one) to show beside this run, on the ids both saw' },
      ['compare with ', this.other]),
    el('label', { title: "This run's tag to compare (A)" }, ['compare tag ', this.key]),
    el('label', { title: "The other run's tag (B): A's tag by default" }, ['with tag ', this.keyB])];
  }

  /** The runs that can be picked. */
  setRuns(names) { this.runNames = names; }

  /** A message above the comparison. */
  say(text) { this.box.append(el('div', { class: 'ls-msg', text })); }

  /**
   * Fill the choices for ``run``, shown with ``view``, its step ``cursor`` and its
   * ``projection`` choice, which a comparison follows (none is open).
   */
  showRun(run, view, cursor = null, projection = null) {
    this.close();
    this.shown = { run, view, cursor, projection };
    this.other.textContent = '';
    this.other.append(el('option', { value: '', text: '(none)' }),
      ...this.runNames.map((n) => el('option', { value: n, text: n === run ? `${n} (this run)` : n })));
    this.key.textContent = '';
    this.key.append(...view.embeddings.map((e) => el('option', { value: e.key, text: e.key })));
    setChoices(this.keyB, [], '');
    this.box.textContent = '';
  }

  /** Close the comparison shown, if any. */
  close() {
    if (this.panel) this.panel.close();
    this.panel = null;
  }

  /**
   * Compare the run shown on ``key`` with run ``other`` on ``keyB`` (A's tag when not given),
   * the header's run and tag by default, at the step cursor, which it then follows.
   */
  async open(other, key, keyB) {
    if (other !== undefined) this.other.value = other;
    if (key !== undefined) setChoices(this.key, [...this.key.options].map((o) => o.value), key);
    const b = this.other.value, chosen = this.key.value, tagB = keyB || chosen;
    const ticket = ++this.ticket;
    this.close();
    this.box.textContent = '';
    if (!b || !chosen) {
      setChoices(this.keyB, [], '');
      return null;
    }
    if (b === this.shown.run && tagB === chosen) {
      setChoices(this.keyB, this.shown.view.embeddings.map((e) => e.key), tagB);
      this.box.append(el('div', { class: 'ls-msg', 'data-role': 'compare-message',
        text: `${b} ${chosen} is the run and tag shown: pick another run or another tag (with tag)` }));
      return null;
    }
    this.box.textContent = 'Comparing…';
    const run = this.shown.run, { cursor, projection } = this.shown;
    const ask = (at) => this.source.compare(run, b, chosen, at, tagB);
    const data = await ask(cursor ? cursor.step : null);
    if (ticket !== this.ticket) return null; // another comparison was asked for since
    setChoices(this.keyB, data.b.keys || [], data.b.key || tagB);
    const panel = new ComparePanel({ data, tip: this.tip, cursor, projection, ask });
    if (cursor && cursor.step != null) panel.follow(cursor.step); // moved while it was asked for
    this.box.textContent = '';
    this.box.append(panel.element);
    this.panel = panel;
    return panel;
  }
}
