// The runs table: every run under the log directory, one row each, above the run view.
//
// A row is the plugin's /table row (or the exported page's): the run's name, status (running,
// finished, interrupted, failed with its error), last step, hyper-parameters and the run
// summary's columns (learnscope/..., as the data has them: no fixed list). A click on a column's
// heading sorts by it (again: the other way); the filters keep the runs of one status, those
// where a finding code still holds, and those whose text (any column's) holds the words typed.
// A click on a row opens that run in the view below (the run picker follows); the check boxes
// choose runs, and two or more chosen show their small multiples (multiples.js), in the table's
// order. Columns whose value is the same in every run are hidden until "every column" is
// ticked. The table is shown with 3 runs or more (a button in the view's header hides it); the
// view shows none with one run or a pair (the comparison puts a pair side by side).

import { el } from './dom.js';
import { SmallMultiples } from './multiples.js';

const SUMMARY_PREFIX = 'learnscope/';
const RUN_STATUSES = ['running', 'finished', 'interrupted', 'failed'];
const SHOWN_IN_FIXED = ['learnscope/status', 'learnscope/error', 'learnscope/last_step'];
const HOLDING_PREFIX = 'learnscope/findings/';
const REFRESH_MS = 30000; // the tab's table is fetched again this often (only what changed is read)
const SHOWN_FROM = 3; // runs from which the table is shown from the start

/** A number as the view shows numbers: whole numbers as they are, others to 3 significant
 * digits, no trailing zeros (in powers of ten beyond 1e5 or below 1e-3), text as it is, a
 * missing value as –. */
export function formatValue(value) {
  if (value == null) return '–';
  if (typeof value === 'number') {
    if (Number.isInteger(value)) return String(value);
    const size = Math.abs(value);
    if (size !== 0 && (size >= 1e5 || size < 1e-3)) return value.toExponential(2);
    return String(Number(value.toPrecision(3))); // 0.01, not 0.0100
  }
  return String(value);
}

/** The order of two cells: numbers by value, text by its words; a missing value last. */
export function compareValues(a, b) {
  if (a == null || b == null) return a == null ? (b == null ? 0 : 1) : -1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

/** The table's columns for ``rows``: run, status, last step, each hyper-parameter, then each
 * summary name the rows hold, in the order first seen. A column is {id, label, title, get}. */
export function tableColumns(rows) {
  const columns = [
    { id: 'name', label: 'run', title: 'The run folder, relative to the log directory: a ' +
      'click on a row opens the run below', get: (r) => r.name },
    { id: 'status', label: 'status', title: 'running (no end yet), finished, interrupted ' +
      '(Ctrl-C) or failed (with its error)', get: (r) => r.status },
    { id: 'last_step', label: 'last step', title: 'The largest step of any snapshot, ' +
      'analysis, findings table or end', get: (r) => r.last_step },
  ];
  const hyper = new Set(), names = new Set();
  for (const r of rows) {
    for (const k of Object.keys(r.hyperparameters || {})) hyper.add(k);
    for (const k of Object.keys(r.summary || {})) if (!SHOWN_IN_FIXED.includes(k)) names.add(k);
  }
  for (const k of [...hyper].sort()) {
    columns.push({ id: `hp:${k}`, label: k, title: `hyper-parameter ${k}`, hyper: true,
      get: (r) => (r.hyperparameters || {})[k] });
  }
  for (const k of names) {
    columns.push({ id: k, label: k.startsWith(SUMMARY_PREFIX) ? k.slice(SUMMARY_PREFIX.length) : k,
      title: `${k} of the run summary`, get: (r) => (r.summary || {})[k] });
  }
  return columns;
}

/** The finding codes of ``rows`` (those a summary counts), sorted. */
export function findingCodes(rows) {
  const codes = new Set();
  for (const r of rows) {
    for (const k of Object.keys(r.summary || {})) {
      if (k.startsWith(HOLDING_PREFIX)) codes.add(k.slice(HOLDING_PREFIX.length));
    }
  }
  return [...codes].sort();
}

/** Whether ``row`` passes the filters: its status, a finding code that still holds in it, and
 * words that some column's text (or its error) holds, case aside. */
export function rowMatches(row, columns, { status = '', code = '', text = '' } = {}) {
  if (status && row.status !== status) return false;
  if (code && !((row.summary || {})[HOLDING_PREFIX + code] > 0)) return false;
  const words = text.trim().toLowerCase();
  if (!words) return true;
  const cells = columns.map((c) => formatValue(c.get(row)).toLowerCase());
  cells.push(String(row.error || '').toLowerCase());
  return words.split(/\s+/).every((w) => cells.some((cell) => cell.includes(w)));
}

/** The runs table (see the module's description) of a source with ``table()``. */
export class RunsTable {
  /** ``onOpen(name)`` opens a run below; ``context()`` gives the view's {cursor, projection}. */
  constructor({ source, tip, onOpen, context }) {
    this.source = source;
    this.onOpen = onOpen;
    this.context = context;
    this.rows = [];
    this.error = null;
    this.state = { shown: [], chosen: [], sortBy: null, descending: false, status: '', code: '',
      text: '', current: null, everyColumn: false, columns: [], refreshes: 0, open: false };
    this.multiples = new SmallMultiples({ source, tip });
    this.button = el('button', { 'data-role': 'runs-table-button', title: 'Show or hide the ' +
      'runs table: every run under the log directory, a row each', onclick: () => {
      this.setOpen(!this.state.open);
    } });
    this.caption = el('div', { class: 'ls-hint', 'data-role': 'runs-table-caption' });
    this.controls = el('div', { class: 'ls-bar' });
    this.holder = el('div', { class: 'ls-table-holder' });
    this.panel = null; // made when first shown
    this.box = el('div', {}, [this.multiples.box]);
    this.timer = null;
    this.multiplesShown = ''; // the runs (and context) the multiples show, to show them once
  }

  /** Show the table (made the first time) or hide it. */
  setOpen(open) {
    this.state.open = open;
    if (open && !this.panel) {
      this.makeControls();
      this.panel = el('div', { 'data-role': 'runs-table', class: 'ls-runs' },
        [this.caption, this.controls, this.holder]);
      this.box.prepend(this.panel);
    }
    if (this.panel) this.panel.hidden = !open;
    this.render();
  }

  /** Fetch the rows and draw the table, shown with 3 runs or more; in the tab, fetch them
   * again every 30 s. */
  async load() {
    await this.refresh();
    if (this.rows.length >= SHOWN_FROM) this.setOpen(true);
    if (this.state.open && this.source.live && this.timer == null) {
      this.timer = setInterval(() => this.refresh().catch(() => {}), REFRESH_MS);
    }
  }

  /** Fetch the rows again (only what changed is read by the server) and draw them. */
  async refresh() {
    const answer = await this.source.table();
    this.rows = (answer && answer.runs) || [];
    this.error = (answer && answer.error) || null;
    const names = new Set(this.rows.map((r) => r.name));
    this.state.chosen = this.state.chosen.filter((n) => names.has(n));
    this.state.refreshes += 1;
    this.render();
  }

  /** Sort by column ``id`` (the same column again: the other way). */
  sortBy(id) {
    if (this.state.sortBy === id) this.state.descending = !this.state.descending;
    else Object.assign(this.state, { sortBy: id, descending: false });
    this.render();
  }

  /** Keep only the rows that pass ``filters`` ({status, code, text}, each optional). */
  filter(filters) {
    Object.assign(this.state, filters);
    this.render();
  }

  /** Choose run ``name`` (or not): two or more chosen show their small multiples. */
  choose(name, chosen) {
    const set = new Set(this.state.chosen);
    if (chosen) set.add(name); else set.delete(name);
    this.state.chosen = [...set];
    this.render();
  }

  /** Mark ``name`` as the run shown below. */
  markCurrent(name) {
    this.state.current = name;
    for (const tr of this.holder.querySelectorAll('tr[data-run]')) {
      tr.classList.toggle('ls-run-shown', tr.dataset.run === name);
    }
  }

  /** The view below opened another run: the multiples follow its cursor and projection. */
  contextChanged() { this.showMultiples(true); }

  /** The rows shown, in the table's order. */
  shownRows(columns) {
    const s = this.state;
    const rows = this.rows.filter((r) => rowMatches(r, columns, s));
    const column = columns.find((c) => c.id === s.sortBy);
    if (column) {
      const sign = s.descending ? -1 : 1;
      rows.sort((a, b) => {
        const va = column.get(a), vb = column.get(b);
        if (va == null || vb == null) return compareValues(va, vb); // missing last either way
        return sign * compareValues(va, vb);
      });
    }
    return rows;
  }

  render() {
    const s = this.state;
    const all = tableColumns(this.rows);
    const rows = this.shownRows(all);
    const varies = (c) => c.id === 'name' || c.id === 'status' || c.id === 'last_step' ||
      this.rows.length < 2 || new Set(this.rows.map((r) => formatValue(c.get(r)))).size > 1;
    const columns = s.everyColumn ? all : all.filter(varies);
    s.columns = columns.map((c) => c.id);
    s.shown = rows.map((r) => r.name);
    const hidden = all.length - columns.length;
    const failed = this.rows.filter((r) => r.status === 'failed').length;
    this.button.textContent = `${s.open ? 'hide' : 'show'} runs table (${this.rows.length})`;
    this.caption.textContent = `${this.rows.length} run(s)` + (failed ? `, ${failed} failed` : '') +
      (rows.length !== this.rows.length ? `, ${rows.length} shown` : '') +
      ': click a row to open its run below, a heading to sort by it';
    if (!this.panel) {
      this.showMultiples();
      return;
    }
    this.updateControls(hidden);
    const head = el('tr', {}, [el('th', { title: 'Choose runs: two or more show their small ' +
      'multiples below, in the table\'s order', text: '✓' }),
    ...columns.map((c) => {
      const mark = s.sortBy === c.id ? (s.descending ? ' ▼' : ' ▲') : '';
      return el('th', { 'data-column': c.id, title: `${c.title} (click to ` +
        'sort)', text: c.label + mark, onclick: () => this.sortBy(c.id) });
    })]);
    const body = rows.map((r) => this.rowElement(r, columns));
    const table = el('table', { 'data-role': 'runs-table-rows' }, [el('thead', {}, head),
      el('tbody', {}, body)]);
    const messages = [];
    if (this.error) messages.push(el('div', { class: 'ls-msg', text: this.error }));
    if (!this.rows.length && !this.error) {
      messages.push(el('div', { class: 'ls-hint', text: 'No run with a learnscope record yet.' }));
    }
    this.holder.replaceChildren(...messages, table);
    this.markCurrent(s.current);
    this.showMultiples();
  }

  /** The filters and the "every column" box, made once (typing keeps its focus). */
  makeControls() {
    const s = this.state;
    const status = el('select', { 'aria-label': 'status filter', title: 'Show the runs of ' +
      'one status only', onchange: () => this.filter({ status: status.value }) },
    [el('option', { value: '', text: 'any status' }),
      ...RUN_STATUSES.map((v) => el('option', { value: v, text: v }))]);
    this.codeMenu = el('select', { 'aria-label': 'finding filter', title: 'Show only the runs ' +
      'where a finding of this code still holds',
    onchange: () => this.filter({ code: this.codeMenu.value }) });
    const text = el('input', { type: 'search', 'aria-label': 'filter text', placeholder: 'filter',
      title: 'Show only the runs where some column holds these words (its name, status, ' +
        'error, a hyper-parameter, a value)',
      oninput: () => { if (text.value !== s.text) this.filter({ text: text.value }); } });
    const every = el('input', { type: 'checkbox', 'aria-label': 'every column',
      onchange: () => { s.everyColumn = every.checked; this.render(); } });
    this.everyText = el('span');
    const parts = [status, this.codeMenu, text, el('label', { title: 'Also show the columns ' +
      'whose value is the same in every run' }, [every, this.everyText])];
    if (this.source.live) {
      parts.push(el('button', { text: 'refresh', title: 'Read what the runs wrote since (only ' +
        'what changed is read)', onclick: () => this.refresh() }));
    }
    this.controls.append(...parts);
  }

  /** The finding menu's codes and the line on hidden columns, for the rows now held. */
  updateControls(hidden) {
    const codes = ['', ...findingCodes(this.rows)];
    const had = [...this.codeMenu.options].map((o) => o.value);
    if (had.join('\n') !== codes.join('\n')) {
      this.codeMenu.replaceChildren(...codes.map((v) => el('option', { value: v,
        text: v || 'any finding' })));
    }
    this.codeMenu.value = this.state.code;
    this.everyText.textContent = ' every column' + (hidden ? ` (${hidden} the same in every ` +
      'run hidden)' : '');
  }

  rowElement(r, columns) {
    const box = el('input', { type: 'checkbox', 'aria-label': `choose ${r.name}`,
      title: `Choose ${r.name}: two or more chosen show their small multiples`,
      onclick: (event) => event.stopPropagation(),
      onchange: () => this.choose(r.name, box.checked) });
    box.checked = this.state.chosen.includes(r.name);
    const cells = columns.map((c) => {
      const value = c.get(r);
      let text = formatValue(value);
      let title = `${c.label}: ${value == null ? 'none' : String(value)}`;
      if (c.id === 'status' && r.status === 'failed' && r.error) {
        text = `failed: ${r.error.length > 40 ? r.error.slice(0, 39) + '…' : r.error}`;
        title = `failed: ${r.error}`;
      }
      if (c.id === 'name' && r.problem) { text = `${r.name} ⚠`; title = r.problem; }
      return el('td', { class: 'ls-nowrap', 'data-column': c.id, title, text });
    });
    return el('tr', { class: 'ls-run-row', 'data-run': r.name, title: `open ${r.name} below`,
      onclick: () => this.onOpen(r.name) }, [el('td', {}, box), ...cells]);
  }

  /** The chosen runs' small multiples, in the table's order (again when ``again``). */
  showMultiples(again = false) {
    const shown = this.state.shown.filter((n) => this.state.chosen.includes(n));
    const order = shown.concat(this.state.chosen.filter((n) => !shown.includes(n)));
    const key = order.length >= 2 ? JSON.stringify(order) : '';
    if (key === this.multiplesShown && !again) return;
    this.multiplesShown = key;
    if (key) {
      const { cursor, projection } = this.context() || {};
      this.multiples.show(order, cursor, projection);
    } else {
      this.multiples.close();
    }
  }
}
