// The findings panel: the run's findings on a timeline and in a table, those that still hold
// first (the heading counts only them), then, apart and greyed, those no longer seen. Each row
// says its life in words (``life`` of the view model: "found at steps 50-300; still holds",
// "seen at step 0 only; healthy at every check since step 50") and, when the record has it,
// what to try. It follows the step cursor (a line on the timeline; the rows of the findings that
// held at its step marked) and a row moves it to the step its finding was last seen.

import { el, setupCanvas, statusText } from './dom.js';

const SEVERITY_COLOURS = { error: '#c62828', warning: '#f9a825', info: '#1565c0' };
const RESOLVED_COLOUR = '#bdbdbd';
const COLUMNS = {
  when: 'When the checks found it, and whether it still holds (found at the newest check ' +
    'that looked for it) or has been healthy at every check since',
  severity: 'error, warning or info (a harmless note)',
  code: 'What kind of problem was found',
  subject: 'The module, parameter or tag it is about',
  message: 'What was seen, with the numbers the check compared',
};
const ADVICE = ['what to try', 'What to do about it (reading.md in the docs says more)'];
const NO_ADVICE = 'The record holds no advice for this finding (written before learnscope ' +
  'kept any): the docs (reading.md, "What each finding means") say what to try';

/** The trainer steps ``findings`` span: each one's first and last sighting, and when it ended. */
export function findingSteps(findings) {
  return findings.flatMap((f) => [f.first_step ?? f.step, f.step]
    .concat(f.resolved_step != null ? [f.resolved_step] : []));
}

/** Whether finding ``f`` held at trainer ``step``: found by then, and not yet healthy again. */
function heldAt(f, step) {
  return step != null && (f.first_step ?? f.step) <= step &&
    (f.resolved_step == null || step < f.resolved_step);
}

const LANE = 11; // pixels between two findings' lanes on the timeline
const MAX_LANES = 12; // more findings share lanes

/** The timeline's height for ``count`` findings: a lane each (at most MAX_LANES), the axis. */
function timelineHeight(count) {
  return 34 + LANE * Math.min(Math.max(count, 1), MAX_LANES);
}

/**
 * Draw ``findings`` over the steps ``s0`` to ``s1`` (one step alone: in the middle, with its
 * one label), each in a lane of its own from its first to its last sighting, coloured by
 * severity, grey once it no longer holds; the ``cursor`` step as a dashed line.
 */
function drawTimeline(ctx, findings, s0, s1, w, h, cursor) {
  ctx.clearRect(0, 0, w, h);
  const sx = (s) => 10 + (s1 === s0 ? 0.5 : (Math.min(s1, Math.max(s0, s)) - s0) / (s1 - s0)) * (w - 20);
  const axis = h - 20, lane = (i) => 12 + LANE * (i % MAX_LANES);
  ctx.strokeStyle = '#9e9e9e';
  ctx.lineWidth = 1;
  ctx.beginPath(); ctx.moveTo(10, axis); ctx.lineTo(w - 10, axis); ctx.stroke();
  if (cursor != null) {
    ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(sx(cursor), 4); ctx.lineTo(sx(cursor), axis + 4); ctx.stroke();
    ctx.setLineDash([]);
  }
  findings.forEach((f, i) => {
    const colour = f.holds ? SEVERITY_COLOURS[f.severity] || '#616161' : RESOLVED_COLOUR;
    const first = sx(f.first_step ?? f.step), last = sx(f.step), y = lane(i);
    ctx.strokeStyle = ctx.fillStyle = colour;
    if (last > first) {
      ctx.lineWidth = 3;
      ctx.beginPath(); ctx.moveTo(first, y); ctx.lineTo(last, y); ctx.stroke();
      ctx.lineWidth = 1;
    }
    for (const x of new Set([first, last])) {
      ctx.beginPath(); ctx.arc(x, y, 4, 0, 2 * Math.PI); ctx.fill();
    }
  });
  ctx.fillStyle = '#616161';
  ctx.font = '10px sans-serif';
  if (s0 === s1) {
    ctx.textAlign = 'center'; ctx.fillText(`step ${s0}`, sx(s0), axis + 14);
    return;
  }
  ctx.textAlign = 'left'; ctx.fillText(`step ${s0}`, 10, axis + 14);
  ctx.textAlign = 'right'; ctx.fillText(`step ${s1}`, w - 10, axis + 14);
}

/** The panel's one-line hint: how to read it, promising only the columns it has. */
function hintText(advice) {
  const what = advice ? " ('what to try' says what to do)" : '';
  return "What TrainingHelper's checks flagged, and when. Good: none; bad: a warning or an " +
    `error that still holds${what}. Click a row to show its step.`;
}

/**
 * The findings of a view in one section; the timeline spans them and ``steps`` (the other
 * panels'). A row moves the step ``cursor`` to the step its finding was last seen.
 */
export class FindingsPanel {
  constructor({ view, cursor, steps }) {
    this.element = el('section');
    const findings = view.findings.map((f) => ({ ...f, holds: f.holds ?? f.resolved_step == null }));
    const holding = findings.filter((f) => f.holds), resolved = findings.filter((f) => !f.holds);
    const advice = findings.some((f) => f.advice);
    this.element.append(el('h2', { 'data-role': 'findings-count', text: `Findings (${holding.length})`,
      title: 'The findings that still hold: found at the newest check that looked for them ' +
        '(one per kind of problem and subject). Those no longer seen are listed apart, greyed.' }));
    this.element.append(el('div', { class: 'ls-hint', 'data-role': 'hint-findings',
      text: hintText(advice) }));
    if (!findings.length) {
      this.element.append(el('div', { 'data-role': 'status-findings',
        text: statusText(view, 'findings', 'No findings: nothing looked wrong.') }));
      return;
    }
    if (!holding.length) {
      this.element.append(el('div', { 'data-role': 'status-findings',
        text: 'None still holds: each finding below was healthy at every check since.' }));
    }
    const all = findingSteps(findings).concat(steps || []);
    const canvas = el('canvas', { 'data-role': 'findings',
      title: 'Each finding, in the order of the table, from its first to its last check that ' +
        'found it (red error, yellow warning, blue info; grey once no longer seen); the dashed ' +
        'line is the step cursor' });
    const w = 640, h = timelineHeight(findings.length), s0 = Math.min(...all), s1 = Math.max(...all);
    const ctx = setupCanvas(canvas, w, h);
    this.element.append(canvas);
    const columns = Object.entries(COLUMNS).concat(advice ? [ADVICE] : []);
    const row = (f) => el('tr', { class: f.holds ? 'ls-click' : 'ls-click ls-resolved',
      title: 'show this step', 'data-step': f.step, onclick: () => cursor.set(f.step, this) },
    [f.life, f.severity, f.code, f.subject, f.message].map((t, i) => el('td', { text: String(t),
      ...(i === 1 || i === 2 ? { class: 'ls-nowrap' } : {}) }))
      .concat(advice ? [el('td', f.advice ? { text: f.advice } : { text: '–', title: NO_ADVICE })]
        : []));
    const ordered = holding.concat(resolved); // those that still hold first
    const rows = ordered.map(row);
    const apart = resolved.length ? [el('tr', { class: 'ls-apart', 'data-role': 'findings-resolved' },
      [el('td', { colspan: columns.length,
        text: `No longer seen (${resolved.length}): found before, healthy at every check since` })])]
      : [];
    this.element.append(el('table', {}, [
      el('tr', {}, columns.map(([t, title]) => el('th', { text: t, title }))),
      ...rows.slice(0, holding.length), ...apart, ...rows.slice(holding.length),
    ]));
    const follow = (step) => {
      drawTimeline(ctx, ordered, s0, s1, w, h, step);
      ordered.forEach((f, i) => rows[i].classList.toggle('ls-current', heldAt(f, step)));
    };
    follow(cursor.step);
    cursor.subscribe(follow);
  }
}
