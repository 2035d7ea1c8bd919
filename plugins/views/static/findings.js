// The findings panel: the run's findings on a timeline and in a table. It follows the step
// cursor (a line on the timeline; the rows of the newest findings at or before its step
// marked) and a row moves it.

import { el, setupCanvas, statusText } from './dom.js';

const SEVERITY_COLOURS = { error: '#c62828', warning: '#f9a825', info: '#1565c0' };
const COLUMNS = {
  step: 'The trainer step of the check that found it',
  severity: 'error, warning or info (a harmless note)',
  code: 'What kind of problem was found',
  subject: 'The module, parameter or tag it is about',
  message: 'What was seen, and what to try',
};

/**
 * Draw ``findings`` as dots on a line from step ``s0`` to ``s1`` (one step alone: in the
 * middle, with its one label), the ``cursor`` step as a dashed line.
 */
function drawTimeline(ctx, findings, s0, s1, w, h, cursor) {
  ctx.clearRect(0, 0, w, h);
  const sx = (s) => 10 + (s1 === s0 ? 0.5 : (Math.min(s1, Math.max(s0, s)) - s0) / (s1 - s0)) * (w - 20);
  ctx.strokeStyle = '#9e9e9e';
  ctx.beginPath(); ctx.moveTo(10, 24); ctx.lineTo(w - 10, 24); ctx.stroke();
  if (cursor != null) {
    ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(sx(cursor), 8); ctx.lineTo(sx(cursor), 34); ctx.stroke();
    ctx.setLineDash([]);
  }
  for (const f of findings) {
    ctx.fillStyle = SEVERITY_COLOURS[f.severity] || '#616161';
    ctx.beginPath(); ctx.arc(sx(f.step), 24, 5, 0, 2 * Math.PI); ctx.fill();
  }
  ctx.fillStyle = '#616161';
  ctx.font = '10px sans-serif';
  if (s0 === s1) {
    ctx.textAlign = 'center'; ctx.fillText(`step ${s0}`, sx(s0), 42);
    return;
  }
  ctx.textAlign = 'left'; ctx.fillText(`step ${s0}`, 10, 42);
  ctx.textAlign = 'right'; ctx.fillText(`step ${s1}`, w - 10, 42);
}

/**
 * The findings of a view in one section; the timeline spans them and ``steps`` (the other
 * panels'). A row moves the step ``cursor`` to its step.
 */
export class FindingsPanel {
  constructor({ view, cursor, steps }) {
    this.element = el('section');
    const findings = view.findings;
    this.element.append(el('h2', { text: `Findings (${findings.length})`,
      title: "The number of findings in the table: one row per kind of problem and subject, " +
        'at the newest step it was seen' }));
    this.element.append(el('div', { class: 'ls-hint', 'data-role': 'hint-findings',
      text: "What TrainingHelper's checks flagged. Good: none; bad: a warning or an error " +
        '(its message says what to try). Click a row to show its step.' }));
    if (!findings.length) {
      this.element.append(el('div', { 'data-role': 'status-findings',
        text: statusText(view, 'findings', 'No findings: nothing looked wrong.') }));
      return;
    }
    const all = findings.map((f) => f.step).concat(steps || []);
    const canvas = el('canvas', { 'data-role': 'findings',
      title: 'Each finding at its step (red error, yellow warning, blue info); the dashed line ' +
        'is the step cursor' });
    const w = 640, h = 46, s0 = Math.min(...all), s1 = Math.max(...all);
    const ctx = setupCanvas(canvas, w, h);
    this.element.append(canvas);
    const rows = findings.map((f) => el('tr', { class: 'ls-click', title: 'show this step',
      onclick: () => cursor.set(f.step, this) },
    [f.step, f.severity, f.code, f.subject, f.message].map((t) => el('td', { text: String(t) }))));
    this.element.append(el('table', {}, [
      el('tr', {}, Object.entries(COLUMNS).map(([t, title]) => el('th', { text: t, title }))),
      ...rows,
    ]));
    const follow = (step) => {
      drawTimeline(ctx, findings, s0, s1, w, h, step);
      let newest = null; // the newest step with findings at or before the cursor's
      for (const f of findings) {
        if (step != null && f.step <= step && (newest == null || f.step > newest)) newest = f.step;
      }
      findings.forEach((f, i) => rows[i].classList.toggle('ls-current', f.step === newest));
    };
    follow(cursor.step);
    cursor.subscribe(follow);
  }
}
