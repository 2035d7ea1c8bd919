// learnscope training-dynamics view: embedding evolution, autocorrelation, findings.
//
// Plain ES modules, canvas 2-D, nothing loaded from the network. Two hosts:
//  * TensorBoard's dynamic plugin loader imports this module in the tab's iframe and calls
//    render(): the data comes from the plugin's routes ./runs and ./view?run=...;
//  * a standalone page (learnscope export, the W&B panel) holds the modules joined into one
//    inline script beside a JSON script element "learnscope-data"; the view then mounts itself.
// The view is a run picker, the run's messages and three panels (embeddings.js,
// autocorrelation.js, findings.js) that follow one shared step cursor (cursor.js); "compare
// with" opens a fourth above them (compare.js): the run's tag beside another run's (or its own
// other) tag, "with tag" (the same tag by default), on the ids they share.
// Coordinates come in units of each snapshot's spread and are drawn in the run record's fixed
// frame per key (the same picture as the Images tab); the view opens the newest run.
// window.learnscopeView is the view: its ``state`` (point counts, frames drawn, hovered and
// pinned point, ...) and the embedding panel's canvas, positions and controls, for tests; its
// ``compare`` is the comparison panel shown (its own ``state``), or null.

import { AutocorrelationPanel } from './autocorrelation.js';
import { ComparePanel } from './compare.js';
import { StepCursor } from './cursor.js';
import { el } from './dom.js';
import { EmbeddingPanel } from './embeddings.js';
import { FindingsPanel } from './findings.js';
import { inlineSource, newestRun, prepareEmbedding, runList, serverSource } from './model.js';
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
      colourBy: null, movers: [], error: null,
      renderer: null, // what draws the scatter's points: 'webgl', or 'canvas' where WebGL is missing
    };
    this.embedding = null;
    this.comparePanel = null;
    root.classList.add('ls-root');
    root.append(styleElement());
    this.header = el('div', { class: 'ls-bar' });
    this.messages = el('div');
    this.compareBox = el('div');
    this.body = el('div');
    this.tip = el('div', { class: 'ls-tip' });
    root.append(this.header, this.messages, this.compareBox, this.body, this.tip);
  }

  /** List the runs and open the newest. */
  async start() {
    const runs = runList(await this.source.runs());
    const select = el('select', { onchange: () => this.loadRun(select.value), 'aria-label': 'run' },
      runs.map((r) => el('option', { value: r.name, text: r.name })));
    this.runSelect = select;
    this.otherSelect = el('select', { 'aria-label': 'compare with', onchange: () => this.openCompare() });
    this.keySelect = el('select', { 'aria-label': 'compare tag', onchange: () => this.openCompare() });
    this.keyBSelect = el('select', { 'aria-label': 'compare with tag',
      onchange: () => this.openCompare(undefined, undefined, undefined, this.keyBSelect.value) });
    this.compareTicket = 0; // the newest comparison asked for; older answers are dropped
    this.runNames = runs.map((r) => r.name);
    this.header.append(el('strong', { text: 'learnscope: training dynamics' }),
      el('label', {}, ['run ', select]), el('label', {}, ['compare with ', this.otherSelect]),
      el('label', {}, ['tag ', this.keySelect]), el('label', {}, ['with tag ', this.keyBSelect]));
    if (!runs.length) {
      this.messages.append(el('div', { class: 'ls-msg', text: 'No run with learnscope data.' }));
      this.state.ready = true;
      return;
    }
    const pair = this.source.pair;
    const first = pair && this.runNames.includes(pair.a) ? pair.a : newestRun(runs).name;
    select.value = first;
    await this.loadRun(first);
    if (pair) {
      for (const m of pair.messages || []) this.compareBox.append(el('div', { class: 'ls-msg', text: m }));
      if (pair.key) await this.openCompare(pair.b, pair.key, undefined, pair.keyB);
    }
  }

  /** Fill the "compare with" and tag choices for the run shown (no comparison open). */
  compareChoices(view) {
    this.otherSelect.textContent = '';
    const shown = this.state.run || view.run;
    this.otherSelect.append(el('option', { value: '', text: '(none)' }),
      ...this.runNames.map((n) => el('option', { value: n, text: n === shown ? `${n} (this run)` : n })));
    this.keySelect.textContent = '';
    this.keySelect.append(...view.embeddings.map((e) => el('option', { value: e.key, text: e.key })));
    this.tagChoices(this.keyBSelect, [], '');
    this.comparePanel = null;
    this.compareBox.textContent = '';
  }

  /** ``select``'s options: ``keys`` (and ``value`` when missing), ``value`` chosen. */
  tagChoices(select, keys, value) {
    select.textContent = '';
    const all = value && !keys.includes(value) ? [...keys, value] : keys;
    select.append(...(all.length ? all : ['']).map((k) => el('option', { value: k, text: k || '(same tag)' })));
    select.value = value;
  }

  /**
   * Compare the run shown on ``key`` with run ``other`` on ``keyB`` (A's tag when not given),
   * the header's run and tag by default; ``steps`` [A's, B's], the newest by default.
   */
  async openCompare(other, key, steps, keyB) {
    if (other !== undefined) this.otherSelect.value = other;
    if (key !== undefined) this.tagChoices(this.keySelect, [...this.keySelect.options].map((o) => o.value), key);
    const b = this.otherSelect.value, chosen = this.keySelect.value, tagB = keyB || chosen;
    const ticket = ++this.compareTicket;
    this.comparePanel = null;
    this.compareBox.textContent = '';
    if (!b || !chosen) {
      this.tagChoices(this.keyBSelect, [], '');
      return null;
    }
    if (b === this.state.run && tagB === chosen) {
      this.tagChoices(this.keyBSelect, this.view.embeddings.map((e) => e.key), tagB);
      this.compareBox.append(el('div', { class: 'ls-msg', 'data-role': 'compare-message',
        text: `${b} ${chosen} is the run and tag shown: pick another run or another tag (with tag)` }));
      return null;
    }
    this.compareBox.textContent = 'Comparing…';
    const data = await this.source.compare(this.state.run, b, chosen, steps, tagB);
    if (ticket !== this.compareTicket) return null; // another comparison was asked for since
    this.tagChoices(this.keyBSelect, data.b.keys || [], data.b.key || tagB);
    const chooseSteps = this.source.chooseSteps ? (sa, sb) => this.openCompare(b, chosen, [sa, sb], tagB) : null;
    const panel = new ComparePanel({ data, tip: this.tip, chooseSteps });
    this.compareBox.textContent = '';
    this.compareBox.append(panel.element);
    this.comparePanel = panel;
    return panel;
  }

  /** The comparison panel shown (its ``state`` for tests), or null. */
  get compare() { return this.comparePanel; }

  async loadRun(run) {
    this.pause();
    this.embedding = null;
    Object.assign(this.state, { ready: false, run, key: null, points: 0, pointsTotal: 0, steps: [],
      position: 0, drawnPoints: 0, hovered: null, pinned: null, pathStart: null, colourBy: null,
      movers: [] });
    this.body.textContent = 'Loading…';
    const view = await this.source.view(run);
    this.view = view;
    this.compareChoices(view);
    this.messages.textContent = '';
    for (const m of view.messages) this.messages.append(el('div', { class: 'ls-msg', text: m }));
    this.body.textContent = '';
    const cursor = new StepCursor();
    const embeddings = view.embeddings.map(prepareEmbedding);
    const panel = new EmbeddingPanel({ view, embeddings, state: this.state, cursor, tip: this.tip });
    this.embedding = embeddings.length ? panel : null;
    const acf = new AutocorrelationPanel({ view, cursor });
    const findings = new FindingsPanel({ view, cursor, steps: this.current ? this.current.steps : [] });
    this.body.append(panel.element, acf.element, findings.element);
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
  window.learnscopeView = view;
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
