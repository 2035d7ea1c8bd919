// The step the panels show, shared: one trainer step that every panel follows.
//
// Every control that picks a step moves the cursor: the scatter's slider and play, the analysis
// slider, a click on a heatmap or a lag-1 chart, a finding's row. Each panel then shows its
// newest item at or before the cursor's step (the embeddings their snapshot, the
// autocorrelation its analysis; the findings mark those that held at that step), its first
// when it has none that early, and says which; the line above the panels says where the cursor
// is.

import { el } from './dom.js';

/**
 * A shared step cursor: ``set(step, from)`` moves it to a trainer step; every subscriber hears
 * it, with the panel that moved it (``from``, or null), which has already shown the step.
 */
export class StepCursor {
  constructor() {
    this.step = null;
    this.listeners = [];
  }

  /** Call ``listener(step, from)`` at every move; returns a function that stops it. */
  subscribe(listener) {
    this.listeners.push(listener);
    return () => { this.listeners = this.listeners.filter((l) => l !== listener); };
  }

  /** Move the cursor to trainer step ``step`` (a panel ``from`` moved it). */
  set(step, from = null) {
    if (step == null) return;
    this.step = step;
    for (const listener of this.listeners) listener(step, from);
  }
}

/** The index of the newest of ascending ``steps`` at or before ``step``, else 0 (the first). */
export function shownIndex(steps, step) {
  let index = 0;
  for (let i = 0; i < steps.length; i++) if (steps[i] <= step) index = i;
  return index;
}

/**
 * How the item of ``shown`` step relates to the cursor's ``step``, as words after its name:
 * nothing when they are equal, else the newest at or before, or the first when none is.
 */
export function relation(shown, step) {
  if (step == null || shown === step) return '';
  return shown < step ? `, the newest at or before step ${step}`
    : `, the first (none at or before step ${step})`;
}

/** The line above the panels that says where ``cursor`` is, kept up to date. */
export function cursorLine(cursor) {
  const value = el('strong', { 'data-role': 'cursor-step' });
  const line = el('div', { class: 'ls-bar', 'data-role': 'cursor',
    title: 'The trainer step the panels show. Every slider, a click on a heatmap or a chart, ' +
      "and a finding's row move it; each panel then shows its newest snapshot or analysis at " +
      'or before this step (its first when it has none that early) and says which.' },
  ['step cursor: ', value, el('span', { class: 'ls-hint', style: 'margin:0',
    text: 'each panel shows its newest snapshot or analysis at or before it' })]);
  const show = (step) => { value.textContent = `step ${step}`; };
  if (cursor.step != null) show(cursor.step);
  cursor.subscribe(show);
  return line;
}
