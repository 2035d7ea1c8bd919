// The autocorrelation panel: per kind, a groups x lags heatmap at one analysis step, and the
// lag-1 median of each group over the steps; it follows the step cursor.

import { categoryColour, diverging } from './colours.js';
import { el, panelSection, setupCanvas } from './dom.js';

/** Draw kind ``kind``'s heatmap at trainer ``step`` on ``ctx`` (``width`` x ``height``). */
function drawHeatmap(ctx, kind, step, width, height) {
  ctx.clearRect(0, 0, width, height);
  ctx.font = '11px sans-serif';
  ctx.fillStyle = '#424242';
  ctx.textAlign = 'center';
  kind.lags.forEach((lag, j) => ctx.fillText(`lag ${lag}`, 110 + 52 * j + 26, 14));
  const si = kind.steps.indexOf(step);
  kind.groups.forEach((g, r) => {
    ctx.fillStyle = '#424242';
    ctx.textAlign = 'right';
    ctx.fillText(g.length > 16 ? g.slice(0, 15) + '…' : g, 104, 24 + 24 * r + 16);
    kind.lags.forEach((_, j) => {
      const v = si < 0 ? null : kind.values[si][r][j];
      ctx.fillStyle = diverging(v);
      ctx.fillRect(110 + 52 * j, 22 + 24 * r, 50, 22);
      ctx.fillStyle = v != null && Math.abs(v) > 0.6 ? '#fff' : '#212121';
      ctx.textAlign = 'center';
      ctx.fillText(v == null ? '–' : v.toFixed(2), 110 + 52 * j + 25, 22 + 24 * r + 15);
    });
  });
}

/** The lag-1 chart's plot area across a canvas ``lw`` wide (the group names on its right). */
function lagOneBox(lw) {
  return { left: 40, right: lw - 90 };
}

/** Draw the lag-1 medians of ``kind``'s groups over its steps, ``step`` marked. */
function drawLagOne(ctx, kind, step, lw, lh) {
  ctx.clearRect(0, 0, lw, lh);
  const { left, right } = lagOneBox(lw), top = 10, bottom = lh - 22;
  const s0 = kind.steps[0], s1 = kind.steps[kind.steps.length - 1];
  const sx = (s) => left + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (right - left);
  let lo = Infinity, hi = -Infinity;
  for (const row of kind.rho1) for (const v of row) if (v != null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!Number.isFinite(lo)) { lo = -1; hi = 1; }
  const pad = Math.max(0.02, (hi - lo) * 0.1);
  lo = Math.max(-1, lo - pad); hi = Math.min(1, hi + pad);
  const sy = (v) => top + (1 - (v - lo) / (hi - lo || 1)) * (bottom - top);
  ctx.strokeStyle = '#bdbdbd';
  ctx.lineWidth = 1;
  ctx.strokeRect(left, top, right - left, bottom - top);
  ctx.font = '10px sans-serif';
  ctx.fillStyle = '#616161';
  ctx.textAlign = 'right';
  for (const v of [lo, hi]) ctx.fillText(v.toFixed(2), left - 4, sy(v) + 3);
  if (lo < 0 && hi > 0) ctx.fillText('0', left - 4, sy(0) + 3);
  ctx.textAlign = 'center';
  ctx.fillText(String(s0), left, lh - 6);
  ctx.fillText(String(s1), right, lh - 6);
  ctx.strokeStyle = '#9e9e9e';
  ctx.setLineDash([3, 3]);
  ctx.beginPath(); ctx.moveTo(sx(step), top); ctx.lineTo(sx(step), bottom); ctx.stroke();
  ctx.setLineDash([]);
  kind.groups.forEach((g, r) => {
    ctx.strokeStyle = categoryColour(r);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    kind.steps.forEach((s, i) => {
      const v = kind.rho1[r][i];
      if (v == null) { pen = false; return; }
      if (pen) ctx.lineTo(sx(s), sy(v)); else ctx.moveTo(sx(s), sy(v));
      pen = true;
    });
    ctx.stroke();
    ctx.fillStyle = categoryColour(r);
    ctx.textAlign = 'left';
    ctx.fillText(g.length > 14 ? g.slice(0, 13) + '…' : g, right + 6, top + 12 + 12 * r);
  });
}

// How to read each kind's charts: what a good and a bad value look like.
const HINTS = {
  params: 'Parameters: good: lag-1 near 1 (each step moves them a little); ' +
    'bad: well below 1 (they jump from step to step).',
  grads: 'Gradients: good: lag-1 near 0 (each step follows fresh batches); bad: below −0.3 ' +
    '(they flip sign: overshooting, lower the learning rate) or above 0.5 (the same push step ' +
    'after step: a higher one would go faster).',
};

// The heatmap's cells: the first column's left edge, a column's and a row's pitch, a cell's size.
const CELL = { left: 110, top: 22, dx: 52, dy: 24, w: 50, h: 22 };

/** Where ``ev`` fell on ``canvas``, in CSS pixels from its content's top-left corner. */
function localPoint(canvas, ev) {
  const r = canvas.getBoundingClientRect();
  return [ev.clientX - r.left - canvas.clientLeft, ev.clientY - r.top - canvas.clientTop];
}

/** The autocorrelation analyses of a view in one section, following the step ``cursor``. */
export class AutocorrelationPanel {
  constructor({ view, cursor }) {
    this.cursor = cursor;
    this.selected = null; // the clicked cell: {kind, row, column}
    this.selecting = false;
    const kinds = view.autocorrelation;
    this.element = panelSection(view, 'autocorrelation', {
      title: 'Autocorrelation of parameters and gradients', has: kinds.length > 0,
      empty: 'No autocorrelation analysis in this run.',
      hint: 'How alike each value is to itself k steps before (red +1, blue −1); good and bad ' +
        'values per kind below. Click a cell or a chart to select that analysis.' });
    if (!kinds.length) return;
    this.steps = [...new Set(kinds.flatMap((k) => k.steps))].sort((a, b) => a - b);
    this.slider = el('input', { type: 'range', min: 0, max: this.steps.length - 1, step: 1,
      value: this.steps.length - 1, 'aria-label': 'analysis step', oninput: () => this.draw(+this.slider.value) });
    this.label = el('span');
    this.detail = el('span', { 'data-role': 'acf-selected' });
    this.element.append(el('div', { class: 'ls-bar' },
      ['analysis step ', this.slider, this.label, this.detail]));
    this.panels = kinds.map((kind) => {
      const heat = el('canvas', { 'data-role': `acf-${kind.kind}`, class: 'ls-pick' });
      const hw = 110 + 52 * kind.lags.length, hh = 40 + 24 * kind.groups.length;
      const line = el('canvas', { 'data-role': `lag1-${kind.kind}`, class: 'ls-pick' });
      const lw = 420, lh = Math.max(hh, 180);
      const chart = el('div', { class: 'ls-chart' }, [
        el('div', { class: 'ls-axis-y', 'data-role': `axis-y-${kind.kind}`, style: `height:${lh}px`,
          text: 'lag-1 autocorrelation (median)' }),
        el('div', {}, [line, el('div', { class: 'ls-axis-x', 'data-role': `axis-x-${kind.kind}`,
          style: `width:${lw}px`, text: 'trainer step' })]),
      ]);
      const hint = HINTS[kind.kind];
      this.element.append(el('div', {}, [
        el('div', { text: `${kind.kind}: mean autocorrelation by lag, and lag-1 median over steps` }),
        hint ? el('div', { class: 'ls-hint', 'data-role': `hint-acf-${kind.kind}`, text: hint }) : null,
        el('div', { class: 'ls-row' }, [heat, chart])]));
      const p = { kind, heatCtx: setupCanvas(heat, hw, hh), hw, hh, lineCtx: setupCanvas(line, lw, lh), lw, lh };
      heat.addEventListener('click', (ev) => this.clickHeatmap(p, ...localPoint(heat, ev)));
      line.addEventListener('click', (ev) => this.clickChart(p, localPoint(line, ev)[0]));
      return p;
    });
    const legend = el('canvas');
    const ctx = setupCanvas(legend, 200, 12);
    for (let i = 0; i < 200; i++) { ctx.fillStyle = diverging(i / 99.5 - 1); ctx.fillRect(i, 0, 1, 12); }
    this.element.append(el('div', { class: 'ls-legend' }, ['-1 ', legend, ' +1']));
    this.draw(this.steps.length - 1);
    if (cursor.step != null) this.follow(cursor.step);
    cursor.subscribe((step) => this.follow(step));
  }

  /** A click at (x, y) on ``p``'s heatmap: select its analysis, and the cell under it if any. */
  clickHeatmap(p, x, y) {
    const column = Math.floor((x - CELL.left) / CELL.dx), row = Math.floor((y - CELL.top) / CELL.dy);
    const inCell = column >= 0 && column < p.kind.lags.length && row >= 0 &&
      row < p.kind.groups.length && x - CELL.left - column * CELL.dx <= CELL.w &&
      y - CELL.top - row * CELL.dy <= CELL.h;
    this.select(+this.slider.value, inCell ? { kind: p.kind, row, column } : this.selected);
  }

  /** A click at ``x`` on ``p``'s lag-1 chart: select the analysis of the nearest step. */
  clickChart(p, x) {
    const steps = p.kind.steps, { left, right } = lagOneBox(p.lw);
    const s0 = steps[0], s1 = steps[steps.length - 1];
    const step = s0 + Math.max(0, Math.min(1, (x - left) / (right - left))) * (s1 - s0);
    let nearest = steps[0];
    for (const s of steps) if (Math.abs(s - step) < Math.abs(nearest - step)) nearest = s;
    this.select(this.steps.indexOf(nearest), this.selected);
  }

  /** Show analysis ``index`` (a heatmap ``cell`` marked) and move the view's step cursor there. */
  select(index, cell) {
    this.selected = cell;
    this.selecting = true; // the panels that follow the cursor answer; this one keeps its choice
    try {
      this.cursor.request(this.steps[index]);
    } finally {
      this.selecting = false;
    }
    this.slider.value = index;
    this.draw(index);
  }

  /** Show the latest analysis at or before trainer step ``step`` (else the first). */
  follow(step) {
    if (this.selecting) return;
    let index = 0;
    for (let i = 0; i < this.steps.length; i++) if (this.steps[i] <= step) index = i;
    if (+this.slider.value !== index) { this.slider.value = index; this.draw(index); }
  }

  draw(index) {
    const step = this.steps[index];
    this.label.textContent = `step ${step}`;
    this.detail.textContent = '';
    for (const p of this.panels) {
      drawHeatmap(p.heatCtx, p.kind, step, p.hw, p.hh);
      drawLagOne(p.lineCtx, p.kind, step, p.lw, p.lh);
      const cell = this.selected;
      if (cell && cell.kind === p.kind) {
        const si = p.kind.steps.indexOf(step);
        const v = si < 0 ? null : p.kind.values[si][cell.row][cell.column];
        const ctx = p.heatCtx;
        ctx.strokeStyle = '#000';
        ctx.lineWidth = 2;
        ctx.strokeRect(CELL.left + CELL.dx * cell.column, CELL.top + CELL.dy * cell.row, CELL.w, CELL.h);
        this.detail.textContent = `${p.kind.kind}, ${p.kind.groups[cell.row]}, ` +
          `lag ${p.kind.lags[cell.column]} at step ${step}: ${v == null ? '–' : v.toFixed(2)}`;
      }
    }
  }
}
