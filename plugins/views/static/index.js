// learnscope training-dynamics view: embedding evolution, autocorrelation, findings.
//
// Plain ES modules, canvas 2-D, nothing loaded from the network. Two hosts:
//  * TensorBoard's dynamic plugin loader imports this module in the tab's iframe and calls
//    render(): the data comes from the plugin's routes ./runs and ./view?run=...;
//  * a standalone page (learnscope export, the W&B panel) holds the modules joined into one
//    inline script beside a JSON script element "learnscope-data"; the view then mounts itself.
// The view is a run picker (the runs stopped or failed listed apart: run_menu.js), the run's
// messages and three panels (embeddings.js,
// autocorrelation.js, findings.js) that follow one shared step cursor (cursor.js), shown on a
// line above them: each panel shows its newest snapshot or analysis at or before the cursor's
// step, and every control that picks a step moves the cursor; it opens on the run's newest
// step (the last snapshot's or analysis's, whichever is later); "compare
// with" opens a fourth under the cursor's line (compare_choice.js, compare.js): the run's tag
// beside another run's (or its own other) tag, "with tag" (the same tag by default), on the ids
// they share, following the cursor and the embedding panel's projection menu, the page's one
// (projection_choice.js); "side by side" opens the small multiples of the run shown and the
// runs picked there (multiples_choice.js, multiples.js), under it too, following both.
// Coordinates come in units of each snapshot's spread and are drawn in the run record's fixed
// frame per key (the same picture as the Images tab); the view opens the newest run.
// The runs table (runs_table.js) sits above it all when the source has one (the tab's /table, an
// exported page's rows): a row opens its run here, and the runs chosen there show their small
// multiples under it (multiples.js), at this view's step cursor and projection.
// mount() announces the view to the page that embeds it with a ``learnscope:mounted`` event on
// window (``event.detail`` is the view): its ``state`` (point counts, frames drawn, hovered and
// pinned point, ...), the embedding panel's canvas, positions and controls, and ``compare``, the
// comparison panel shown (its own ``state``), or null.

import { AutocorrelationPanel } from './autocorrelation.js';
import { CompareChooser } from './compare_choice.js';
import { StepCursor, cursorLine } from './cursor.js';
import { el } from './dom.js';
import { EmbeddingPanel } from './embeddings.js';
import { FindingsPanel, findingSteps } from './findings.js';
import { inlineSource, newestRun, prepareEmbedding, runList, serverSource } from './model.js';
import { ProjectionChoice } from './projection_choice.js';
import { SideBySideChoice } from './multiples_choice.js';
import { menuOrder, runOptions } from './run_menu.js';
import { RunsTable } from './runs_table.js';
import { styleElement } from './styles.js';

const INLINE_DATA = 'learnscope-data';

/** The view of a data source {runs(), view(name)} in ``root``. */
export class LearnscopeView {
  constructor(root, source) {
    this.root = root;
    this.source = source;
    this.state = {
      ready: false, run: null, key: null, points: 0, pointsTotal: 0, steps: [], position: 0,
      playing: false, frames: 0, drawnPoints: 0, hovered: null, pinned: null, pathStart: null,
      colourBy: null, movers: [], error: null, projection: 'pca',
      renderer: null, // what draws the scatter's points: 'webgl', or 'canvas' where WebGL is missing
    };
    this.embedding = null;
    root.classList.add('ls-root');
    root.append(styleElement());
    this.header = el('div', { class: 'ls-bar' });
    this.messages = el('div');
    this.body = el('div');
    this.tip = el('div', { class: 'ls-tip' });
    this.chooser = new CompareChooser({ source, tip: this.tip });
    this.sideBySide = new SideBySideChoice({ source, tip: this.tip }); // small multiples
    this.table = null; // the runs table, when the source has one
    this.tableBox = el('div');
    this.cursor = null; // the step cursor and projection choice of the run shown
    this.projection = null;
    // the chooser's box: in body
    root.append(this.header, this.tableBox, this.messages, this.body, this.tip);
  }

  /** List the runs and open the newest. */
  async start() {
    const runs = runList(await this.source.runs());
    const select = el('select', { onchange: () => this.loadRun(select.value), 'aria-label': 'run',
      title: 'The run shown: each run folder with a learnscope record (the newest with data ' +
        'opens first); the runs stopped (Ctrl-C) or failed are listed apart, after the others' },
      runOptions(runs));
    this.chooser.setRuns(menuOrder(runs).map((r) => r.name));
    this.sideBySide.setRuns(menuOrder(runs).map((r) => r.name));
    this.header.append(el('strong', { text: 'learnscope: training dynamics' }),
      el('label', {}, ['run ', select]), ...this.chooser.labels(), ...this.sideBySide.labels());
    this.runSelect = select;
    await this.startTable();
    if (!runs.length) {
      this.messages.append(el('div', { class: 'ls-msg', text: 'No run with learnscope data.' }));
      this.state.ready = true;
      return;
    }
    const pair = this.source.pair;
    const first = pair && this.chooser.runNames.includes(pair.a) ? pair.a : newestRun(runs).name;
    select.value = first;
    await this.loadRun(first);
    if (pair) {
      for (const m of pair.messages || []) this.chooser.say(m);
      if (pair.key) await this.openCompare(pair.b, pair.key, pair.keyB);
    }
  }

  /** The runs table above the view, when the source has one (a row opens its run here). */
  async startTable() {
    if (!this.source.table) return;
    const table = new RunsTable({ source: this.source, tip: this.tip,
      onOpen: (name) => this.openRun(name),
      context: () => ({ cursor: this.cursor, projection: this.projection }) });
    try {
      await table.load();
    } catch (error) {
      this.tableBox.append(el('div', { class: 'ls-msg', text: `runs table: ${error}` }));
      return;
    }
    // one run, or a pair (the comparison shows two runs side by side): no table, and the page
    // is laid out as it was
    if (!table.state.open && !table.error) return;
    this.table = table;
    this.header.append(table.button);
    this.tableBox.append(table.box);
  }

  /** Open run ``name`` (as the run picker does), unless it is shown already. */
  async openRun(name) {
    if (this.runSelect) this.runSelect.value = name;
    if (this.state.run !== name || !this.state.ready) await this.loadRun(name);
  }

  /** Compare the run shown with another (see CompareChooser.open). */
  openCompare(other, key, keyB) { return this.chooser.open(other, key, keyB); }

  /** The comparison panel shown (its ``state`` for tests), or null. */
  get compare() { return this.chooser.panel; }

  /** Show the run shown beside runs ``others`` in small multiples (multiples_choice.js). */
  openSideBySide(others) { return this.sideBySide.open(others); }

  /** The small multiples shown (their ``state`` for tests), or null. */
  get multiples() { return this.sideBySide.multiples; }

  async loadRun(run) {
    this.pause();
    this.embedding = null;
    Object.assign(this.state, { ready: false, run, key: null, points: 0, pointsTotal: 0, steps: [],
      position: 0, drawnPoints: 0, hovered: null, pinned: null, pathStart: null, colourBy: null,
      movers: [], projection: 'pca' });
    this.body.textContent = 'Loading…';
    const view = await this.source.view(run);
    this.view = view;
    const cursor = new StepCursor();
    const projection = new ProjectionChoice();
    Object.assign(this, { cursor, projection });
    this.chooser.showRun(run, view, cursor, projection);
    this.sideBySide.showRun(run, cursor, projection);
    this.messages.textContent = '';
    for (const m of view.messages) this.messages.append(el('div', { class: 'ls-msg', text: m }));
    this.body.textContent = '';
    const embeddings = view.embeddings.map(prepareEmbedding);
    const panel = new EmbeddingPanel({ view, embeddings, state: this.state, cursor, tip: this.tip,
      projection });
    this.embedding = embeddings.length ? panel : null;
    const acf = new AutocorrelationPanel({ view, cursor });
    const steps = (this.current ? this.current.steps : []).concat(acf.steps || []);
    const findings = new FindingsPanel({ view, cursor, steps });
    const all = steps.concat(findingSteps(view.findings));
    this.body.append(...(all.length ? [cursorLine(cursor)] : []), this.chooser.box,
      this.sideBySide.box, panel.element, acf.element, findings.element);
    cursor.set(all.length ? Math.max(...all) : null); // every panel at its newest
    if (this.table) {
      this.table.markCurrent(run);
      this.table.contextChanged();
    }
    this.state.readyMs = Math.round(performance.now()); // since this page (or iframe) started
    this.state.ready = true;
  }

  // The embedding panel, as the tests and the benchmark reach it.
  get current() { return this.embedding && this.embedding.current; }
  get canvas() { return this.embedding && this.embedding.canvas; }
  get ctx() { return this.embedding && this.embedding.ctx; }
  get pos() { return this.embedding && this.embedding.pos; }
  get width() { return this.embedding && this.embedding.width; }
  get height() { return this.embedding && this.embedding.height; }
  play() { if (this.embedding) this.embedding.play(); }
  pause() { if (this.embedding) this.embedding.pause(); }
  findMovers() { if (this.embedding) this.embedding.findMovers(); }
  pin(k) { if (this.embedding) this.embedding.pin(k); }
}

/** Mount the view in ``container`` with a data source {runs(): [{name, time}], view(name)}. */
export async function mount(container, source) {
  const view = new LearnscopeView(container, source);
  window.dispatchEvent(new CustomEvent('learnscope:mounted', { detail: view }));
  try {
    await view.start();
  } catch (error) {
    view.state.error = String(error);
    container.append(el('div', { class: 'ls-msg', text: `learnscope view failed: ${error}` }));
    throw error;
  }
  return view;
}

/** TensorBoard's dynamic plugin entry point: data from this plugin's routes. */
export async function render() {
  const container = el('div');
  document.body.style.margin = '0';
  document.body.append(container);
  return mount(container, serverSource());
}

/** The standalone page: data inline in the JSON script element "learnscope-data". */
export function renderInline() {
  const container = el('div');
  document.body.append(container);
  return mount(container, inlineSource(INLINE_DATA));
}

if (typeof document !== 'undefined' && document.getElementById(INLINE_DATA)) {
  renderInline();
}
