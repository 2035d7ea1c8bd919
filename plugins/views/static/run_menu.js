// A run menu's entries: the runs that finished (or go on) first, then, apart, those that were
// stopped (Ctrl-C) or failed, each marked with how it ended and at which step. A run is
// {name, failed, ended}: ``ended`` its newest run's end entry {step, status}, or null while it
// has none (it goes on, or its process was killed); ``failed`` a failed run's exception.

import { el } from './dom.js';

const STOPPED_OR_FAILED = 'stopped or failed';
const FINISHED = 'finished or running';

/** Whether ``run`` was stopped (Ctrl-C) or failed: its newest run did not finish. */
export function endedEarly(run) {
  const status = run.ended ? run.ended.status : null;
  return status === 'failed' || status === 'interrupted' || (!run.ended && !!run.failed);
}

/** How ``run`` ended, in the menu's words: "failed at step 0", "interrupted at step 252", or
 * '' for a run that finished or goes on. */
export function endingLabel(run) {
  const step = run.ended && run.ended.step != null ? ` at step ${run.ended.step}` : '';
  if (run.failed || (run.ended && run.ended.status === 'failed')) return `failed${step}`;
  if (run.ended && run.ended.status === 'interrupted') return `interrupted${step}`;
  return '';
}

/** What the menu's title says of ``run``: how it ended, in full. */
export function endingTitle(run) {
  const step = run.ended && run.ended.step != null ? ` at step ${run.ended.step}` : '';
  if (run.failed) return `${run.name}: failed${step}: ${run.failed}`;
  if (run.ended && run.ended.status === 'interrupted') {
    return `${run.name}: interrupted by Ctrl-C${step}; what it wrote until then is shown`;
  }
  if (run.ended) return `${run.name}: finished${step}`;
  return `${run.name}: no end yet (it goes on, or its process was killed)`;
}

/** ``runs`` in menu order: those that finished or go on, then those stopped or failed. */
export function menuOrder(runs) {
  return runs.filter((r) => !endedEarly(r)).concat(runs.filter(endedEarly));
}

/**
 * The options of a run menu for ``runs``: one per run (its name, and how it ended when it did
 * not finish), the stopped and failed runs in a group of their own after the others.
 * ``text(run, label)`` makes an option's text (by default the name, then the label in brackets).
 */
export function runOptions(runs, text = (r, label) => (label ? `${r.name} (${label})` : r.name)) {
  const option = (r) => el('option', { value: r.name, text: text(r, endingLabel(r)),
    title: endingTitle(r) });
  const early = runs.filter(endedEarly);
  if (!early.length) return runs.map(option);
  const others = runs.filter((r) => !endedEarly(r));
  return [
    ...(others.length ? [el('optgroup', { label: FINISHED }, others.map(option))] : []),
    el('optgroup', { label: STOPPED_OR_FAILED }, early.map(option)),
  ];
}
