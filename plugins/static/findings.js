// The findings panel: the run's findings on a timeline and in a table; a row moves the cursor.

import { el, setupCanvas, statusText } from './dom.js';

const SEVERITY_COLOURS = { error: '#c62828', warning: '#f9a825', info: '#1565c0' };

/** Draw ``findings`` as dots on a line from step ``s0`` to ``s1``. */
function drawTimeline(ctx, findings, s0, s1, w) {
  const sx = (s) => 10 + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (w - 20);
  ctx.strokeStyle = '#9e9e9e';
  ctx.beginPath(); ctx.moveTo(10, 24); ctx.lineTo(w - 10, 24); ctx.stroke();
  for (const f of findings) {
    ctx.fillStyle = SEVERITY_COLOURS[f.severity] || '#616161';
    ctx.beginPath(); ctx.arc(sx(f.step), 24, 5, 0, 2 * Math.PI); ctx.fill();
  }
  ctx.fillStyle = '#616161';
  ctx.font = '10px sans-serif';
  ctx.textAlign = 'left'; ctx.fillText(`step ${s0}`, 10, 42);
  ctx.textAlign = 'right'; ctx.fillText(`step ${s1}`, w - 10, 42);
}

/** The findings of a view in one section; the timeline spans them and ``steps`` (the snapshots'). */
export class FindingsPanel {
  constructor({ view, cursor, steps }) {
    this.element = el('section');
    const findings = view.findings;
    this.element.append(el('h2', { text: `Findings (${findings.length})` }));
    this.element.append(el('div', { class: 'ls-hint', 'data-role': 'hint-findings',
      text: "What TrainingHelper's checks flagged. Good: none; bad: a warning or an error " +
        '(its message says what to try). Click a row to show its step.' }));
    if (!findings.length) {
      this.element.append(el('div', { 'data-role': 'status-findings',
        text: statusText(view, 'findings', 'No findings: nothing looked wrong.') }));
      return;
    }
    const all = findings.map((f) => f.step).concat(steps || []);
    const canvas = el('canvas', { 'data-role': 'findings' });
    const w = 640, h = 46;
    drawTimeline(setupCanvas(canvas, w, h), findings, Math.min(...all), Math.max(...all), w);
    this.element.append(canvas);
    this.element.append(el('table', {}, [
      el('tr', {}, ['step', 'severity', 'code', 'subject', 'message'].map((t) => el('th', { text: t }))),
      ...findings.map((f) => el('tr', { class: 'ls-click', title: 'show this step', onclick: () => cursor.request(f.step) },
        [f.step, f.severity, f.code, f.subject, f.message].map((t) => el('td', { text: String(t) })))),
    ]));
  }
}
