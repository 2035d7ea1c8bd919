// learnscope training-dynamics view: embedding evolution, autocorrelation, findings.
//
// Plain ES modules, canvas 2-D, nothing loaded from the network. Two hosts:
//  * TensorBoard's dynamic plugin loader imports this module in the tab's iframe and calls
//    render(): the data comes from the plugin's routes ./runs and ./view?run=...;
//  * a standalone page (learnscope export, the W&B panel) holds the modules joined into one
//    inline script beside a JSON script element "learnscope-data"; the view then mounts itself.
// Coordinates come in units of each snapshot's spread and are drawn in the run record's fixed
// frame per key (the same picture as the Images tab); the view opens the newest run.

import { LearnscopeView } from './app.js';
import { el } from './dom.js';
import { inlineSource, serverSource } from './model.js';

const INLINE_DATA = 'learnscope-data';

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
