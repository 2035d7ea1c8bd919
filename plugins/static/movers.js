// Movers: the points whose nearest neighbours changed most between two snapshots, and the list
// of them beside the scatter.

import { columnText, el } from './dom.js';

const NEIGHBOURS = 10;
const LISTED = 20;

/** For each point, indices of its k nearest neighbours (2D, brute force), as an Int32Array. */
export function nearestNeighbours(frame, n, k) {
  const out = new Int32Array(n * k).fill(-1);
  const best = new Float64Array(k);
  for (let i = 0; i < n; i++) {
    best.fill(Infinity);
    const xi = frame[2 * i], yi = frame[2 * i + 1];
    const base = i * k;
    for (let j = 0; j < n; j++) {
      if (j === i) continue;
      const dx = frame[2 * j] - xi, dy = frame[2 * j + 1] - yi;
      const d = dx * dx + dy * dy;
      if (!(d < best[k - 1])) continue;
      let p = k - 1;
      while (p > 0 && best[p - 1] > d) {
        best[p] = best[p - 1];
        out[base + p] = out[base + p - 1];
        p--;
      }
      best[p] = d;
      out[base + p] = j;
    }
  }
  return out;
}

/** Fraction of each point's k nearest neighbours replaced between two frames. */
export function neighbourChange(frameA, frameB, n, k) {
  const a = nearestNeighbours(frameA, n, k);
  const b = nearestNeighbours(frameB, n, k);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const set = new Set(a.subarray(i * k, i * k + k));
    let kept = 0;
    for (let j = 0; j < k; j++) if (set.has(b[i * k + j])) kept++;
    out[i] = 1 - kept / k;
  }
  return out;
}

/**
 * The movers box: two snapshots to compare, a find button (calls ``onFind``), and the top
 * movers (a row calls ``onPick`` with its point).
 */
export class MoversList {
  constructor(onPick, onFind) {
    this.onPick = onPick;
    this.from = el('select', { 'aria-label': 'movers from' });
    this.to = el('select', { 'aria-label': 'movers to' });
    this.list = el('div', { class: 'ls-movers' });
    this.nodes = [
      el('h2', { text: `Movers: ${NEIGHBOURS} nearest neighbours replaced` }),
      el('div', { class: 'ls-bar' }, ['from ', this.from, ' to ', this.to,
        el('button', { text: 'find', onclick: onFind })]),
      this.list,
    ];
  }

  /** Offer the snapshots of ``steps``: from the one before the last to the last. */
  showSteps(steps) {
    for (const s of [this.from, this.to]) {
      s.textContent = '';
      steps.forEach((step, i) => s.append(el('option', { value: i, text: `step ${step}` })));
    }
    this.from.value = Math.max(0, steps.length - 2);
    this.to.value = steps.length - 1;
    this.list.textContent = '';
  }

  /** List the top movers of embedding ``e`` between the chosen snapshots; them as {id, change}. */
  find(e) {
    const a = +this.from.value, b = +this.to.value;
    const n = e.ids.length;
    const change = neighbourChange(e.frames[a], e.frames[b], n, Math.min(NEIGHBOURS, n - 1));
    const order = Array.from({ length: n }, (_, i) => i).sort((i, j) => change[j] - change[i]);
    const top = order.slice(0, LISTED);
    const label = e.columns[0];
    this.list.textContent = '';
    this.list.append(el('table', {}, [
      el('tr', {}, [el('th', { text: 'id' }), el('th', { text: label ? label.name : '' }),
        el('th', { text: 'replaced' })]),
      ...top.map((k) => el('tr', { class: 'ls-click', onclick: () => this.onPick(k) }, [
        el('td', { text: e.ids[k] }),
        el('td', { text: label ? columnText(label, k) : '' }),
        el('td', { text: `${Math.round(change[k] * 100)}%` }),
      ])),
    ]));
    return top.map((k) => ({ id: e.ids[k], change: change[k] }));
  }
}
