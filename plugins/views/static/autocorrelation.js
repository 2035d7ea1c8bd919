// The autocorrelation panel: per kind, a groups x lags heatmap at one analysis step, and the
// lag-1 median of each group over the steps (each group's value at that analysis beside it); it
// follows the step cursor (the newest analysis at or before its step) and moves it.

import { categoryColour, diverging } from './colours.js';
import { relation, shownIndex } from './cursor.js';
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

/** The lag-1 chart's plot area across a canvas ``lw`` wide (the value labels on its left). */
function lagOneBox(lw) {
  return { left: 40, right: lw - 14 };
}

/**
 * Draw the lag-1 medians of ``kind``'s groups over its steps, ``step`` marked (a dashed line, a
 * dot on each group's value). A value with no neighbour to join is a dot; one analysis alone is
 * one dot per group in the middle, its step the one label of the step axis.
 */
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
  if (s0 === s1) ctx.fillText(String(s0), sx(s0), lh - 6);
  else { ctx.fillText(String(s0), left, lh - 6); ctx.fillText(String(s1), right, lh - 6); }
  ctx.strokeStyle = '#9e9e9e';
  ctx.setLineDash([3, 3]);
  ctx.beginPath(); ctx.moveTo(sx(step), top); ctx.lineTo(sx(step), bottom); ctx.stroke();
  ctx.setLineDash([]);
  const dot = (x, y, radius) => { ctx.beginPath(); ctx.arc(x, y, radius, 0, 2 * Math.PI); ctx.fill(); };
  kind.groups.forEach((g, r) => {
    const values = kind.rho1[r];
    ctx.strokeStyle = ctx.fillStyle = categoryColour(r);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    const alone = []; // values with no neighbour to join: dots
    kind.steps.forEach((s, i) => {
      const v = values[i];
      if (v == null) { pen = false; return; }
      if (pen) ctx.lineTo(sx(s), sy(v)); else ctx.moveTo(sx(s), sy(v));
      pen = true;
      if (values[i - 1] == null && values[i + 1] == null) alone.push([sx(s), sy(v)]);
    });
    ctx.stroke();
    for (const [x, y] of alone) dot(x, y, 3);
    const shown = kind.steps.indexOf(step);
    if (shown >= 0 && values[shown] != null) dot(sx(step), sy(values[shown]), 3.5);
  });
}

/**
 * Each group's lag-1 value of ``kind`` at ``step`` in ``box``: its colour, name and value, and
 * its tau when the analysis has one.
 */
function showLagOneValues(box, kind, step) {
  const i = kind.steps.indexOf(step);
  box.textContent = '';
  kind.groups.forEach((g, r) => {
    const v = i < 0 ? null : kind.rho1[r][i];
    const tau = i < 0 || !kind.tau ? null : kind.tau[r][i];
    box.append(el('div', { 'data-group': g }, [
      el('span', { class: 'ls-swatch', style: `background:${categoryColour(r)}` }),
      `${g.length > 14 ? g.slice(0, 13) + '…' : g} `,
      el('span', { 'data-role': 'lag1-value', text: v == null ? '–' : v.toFixed(2) }),
      tau == null ? null : el('span', { class: 'ls-help', 'data-role': 'tau-value',
        text: ` τ ${tauText(tau)}`, title: tauWords(tau) }),
    ]));
  });
}

// How to read each kind's charts: lag-1 bands that cover every value from −1 to 1, the same
// as docs/reading.md gives ("What a lag-1 value says").
const HINTS = {
  params: 'Parameters, lag-1: good from 0.9 to 1 (each step moves them a little); fair from 0 ' +
    'to 0.9 (large steps for their curvature: watch the loss); bad below 0 (they jump back ' +
    'and forth: lower the learning rate).',
  grads: 'Gradients, lag-1: good from −0.3 to 0.5 (each step follows fresh batches); bad ' +
    'below −0.3 (they flip sign: overshooting, lower the learning rate) or above 0.5 (the ' +
    'same push step after step: a higher learning rate would go faster).',
};

// What tau is, said where it is shown (beside each group's lag-1 value).
const TAU = 'τ, the integrated autocorrelation time: about how many steps one independent value ' +
  'spans (1: each step is new; above 1: values linger for τ steps). Below 1, successive values ' +
  'are anti-correlated: each step partly undoes the last, typical of gradients. Shown once the ' +
  'history holds at least 50 τ steps.';

// Where TensorBoard shows the same series, smoothed and with their ends cut by default.
const SMOOTHING = "TensorBoard's Scalars, Time Series and Custom Scalars tabs show the same " +
  'lag-1 medians and τ (~learnscope/autocorrelation/...) with Smoothing 0.6 and "Ignore ' +
  'outliers in chart scaling" on by default, which bend a series of a few analyses and cut ' +
  'its first and last points: set Smoothing to 0 there and untick "Ignore outliers" to read ' +
  'them as written (the charts here are neither smoothed nor cut).';

/** A tau as the panel writes it: two significant digits, whole from 10 up (0.14, 3.2, 47). */
function tauText(tau) {
  return tau >= 10 ? String(Math.round(tau)) : tau.toPrecision(2);
}

/** What a tau value says, in words, for its title. */
function tauWords(tau) {
  const shown = tauText(tau);
  if (tau < 1) {
    return `τ = ${shown}, below 1: successive values are anti-correlated, each step partly ` +
      'undoes the last (typical of gradients)';
  }
  return `τ = ${shown}: one independent value about every ${shown} steps`;
}

// What the lag-1 autocorrelation is.
const LAG_ONE = 'Lag-1 autocorrelation: how alike each value is to itself one step before, ' +
  'the median over the values sampled in a group (+1 the same, 0 unrelated, −1 opposite).';

// The heatmap's cells: the first column's left edge, a column's and a row's pitch, a cell's size.
const CELL = { left: 110, top: 22, dx: 52, dy: 24, w: 50, h: 22 };

/** Where ``ev`` fell on ``canvas``, in CSS pixels from its content's top-left corner. */
function localPoint(canvas, ev) {
  const r = canvas.getBoundingClientRect();
  return [ev.clientX - r.left - canvas.clientLeft, ev.clientY - r.top - canvas.clientTop];
}

/**
 * The autocorrelation analyses of a view in one section. It follows the step ``cursor`` (the
 * newest analysis at or before its step, else the first) and moves it: its slider, a click on
 * a heatmap or a lag-1 chart set it to the analysis's step.
 */
export class AutocorrelationPanel {
  constructor({ view, cursor }) {
    this.cursor = cursor;
    this.selected = null; // the clicked cell: {kind, row, column}
    const kinds = view.autocorrelation;
    this.element = panelSection(view, 'autocorrelation', {
      title: 'Autocorrelation of parameters and gradients', has: kinds.length > 0,
      empty: 'No autocorrelation analysis in this run.',
      hint: 'How alike each value is to itself k steps before (red +1, blue −1); good and bad ' +
        'values per kind below. Click a cell or a chart to select that analysis.' });
    if (!kinds.length) return;
    this.steps = [...new Set(kinds.flatMap((k) => k.steps))].sort((a, b) => a - b);
    this.slider = el('input', { type: 'range', min: 0, max: this.steps.length - 1, step: 1,
      value: this.steps.length - 1, 'aria-label': 'analysis step',
      title: 'The analysis shown: drag through the analyses (it moves the step cursor)',
      oninput: () => this.select(+this.slider.value, this.selected) });
    this.slider.disabled = this.steps.length < 2; // one analysis: nothing to move to
    this.label = el('span', { 'data-role': 'analysis-step',
      title: 'The analysis shown: its trainer step, and how it relates to the step cursor' });
    this.detail = el('span', { 'data-role': 'acf-selected',
      title: "The selected heatmap cell: its kind, group and lag, and its value at this analysis" });
    this.element.append(el('div', { class: 'ls-bar' },
      [el('label', { title: this.slider.title }, ['analysis ', this.slider]), this.label, this.detail]));
    this.panels = kinds.map((kind) => {
      const heat = el('canvas', { 'data-role': `acf-${kind.kind}`, class: 'ls-pick',
        title: `Mean autocorrelation of the ${kind.kind} of each group (row) at each lag ` +
          '(column), at the analysis shown: red +1, white 0, blue −1. Click a cell to select it.' });
      const hw = 110 + 52 * kind.lags.length, hh = 40 + 24 * kind.groups.length;
      const line = el('canvas', { 'data-role': `lag1-${kind.kind}`, class: 'ls-pick',
        title: `Lag-1 autocorrelation of the ${kind.kind} of each group (the median over its ` +
          'sampled values) at each analysis; the dashed line and the dots mark the analysis ' +
          'shown. Click to select the nearest analysis.' });
      const lw = 340, lh = Math.max(hh, 180);
      const values = el('div', { class: 'ls-series', 'data-role': `lag1-values-${kind.kind}`,
        title: `Each group's lag-1 autocorrelation of the ${kind.kind} (median) at the analysis shown` });
      const chart = el('div', { class: 'ls-chart' }, [
        el('div', { class: 'ls-axis-y', 'data-role': `axis-y-${kind.kind}`, style: `height:${lh}px`,
          text: 'lag-1 autocorrelation (median)', title: LAG_ONE }),
        el('div', {}, [line, el('div', { class: 'ls-axis-x', 'data-role': `axis-x-${kind.kind}`,
          style: `width:${lw}px`, text: 'trainer step' })]),
        values,
      ]);
      const hint = HINTS[kind.kind];
      this.element.append(el('div', {}, [
        el('div', { text: `${kind.kind}: mean autocorrelation by lag, and lag-1 median over steps`,
          title: `The ${kind.kind === 'grads' ? 'gradients' : 'parameters'}: the heatmap at the ` +
            `analysis shown, the chart over every analysis. ${LAG_ONE}` }),
        hint ? el('div', { class: 'ls-hint', 'data-role': `hint-acf-${kind.kind}`, text: hint }) : null,
        el('div', { class: 'ls-row' }, [heat, chart])]));
      const p = { kind, heatCtx: setupCanvas(heat, hw, hh), hw, hh, lineCtx: setupCanvas(line, lw, lh), lw, lh,
        values };
      heat.addEventListener('click', (ev) => this.clickHeatmap(p, ...localPoint(heat, ev)));
      line.addEventListener('click', (ev) => this.clickChart(p, localPoint(line, ev)[0]));
      return p;
    });
    const legend = el('canvas');
    const ctx = setupCanvas(legend, 200, 12);
    for (let i = 0; i < 200; i++) { ctx.fillStyle = diverging(i / 99.5 - 1); ctx.fillRect(i, 0, 1, 12); }
    this.element.append(el('div', { class: 'ls-legend',
      title: "The heatmaps' colours: −1 blue, 0 white, +1 red" }, ['-1 ', legend, ' +1']));
    const taus = kinds.some((k) => (k.tau || []).some((row) => row.some((t) => t != null)));
    if (taus) this.element.append(el('div', { class: 'ls-hint', 'data-role': 'note-tau', text: TAU }));
    this.element.append(el('div', { class: 'ls-hint', 'data-role': 'note-smoothing',
      text: SMOOTHING }));
    this.show(cursor.step == null ? this.steps.length - 1 : shownIndex(this.steps, cursor.step));
    cursor.subscribe((step, from) => { if (from !== this) this.show(shownIndex(this.steps, step)); });
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
    this.cursor.set(this.steps[index], this);
    this.show(index);
  }

  /** Show analysis ``index``: the slider, the label, the heatmaps and the lag-1 charts. */
  show(index) {
    this.slider.value = index;
    this.draw(index);
  }

  draw(index) {
    const step = this.steps[index];
    this.label.textContent = `analysis of step ${step}` + relation(step, this.cursor.step);
    this.detail.textContent = '';
    for (const p of this.panels) {
      drawHeatmap(p.heatCtx, p.kind, step, p.hw, p.hh);
      drawLagOne(p.lineCtx, p.kind, step, p.lw, p.lh);
      showLagOneValues(p.values, p.kind, step);
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
