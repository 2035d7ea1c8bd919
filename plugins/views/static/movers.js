// Movers: the points whose nearest neighbours changed most between two snapshots, and the list
// of them beside the scatter. A changed neighbourhood is defined once, in
// learnscope/embeddings/neighbourhoods.py (neighbourhood_change, which ranks the points of a comparison of
// two runs): the neighbours a point kept of its k nearest, then how far its old ones went (its
// drift); here it is applied to two snapshots of the 2-D view, the coordinates the page holds,
// with the same k, which the view model gives (``neighbours`` of each key).

import { columnText, el } from './dom.js';

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

/** Mean distance, in ``frame``, from point ``i`` to the k points ``near`` lists for it. */
function meanDistance(frame, near, i, k) {
  let sum = 0;
  for (let j = 0; j < k; j++) {
    const o = near[i * k + j];
    sum += Math.hypot(frame[2 * o] - frame[2 * i], frame[2 * o + 1] - frame[2 * i + 1]);
  }
  return sum / k;
}

/**
 * How each point's neighbourhood changed from ``frameA`` to ``frameB`` (neighbourhood_change):
 * ``change``, the fraction of its k nearest neighbours replaced, and ``drift``, in frame B the
 * mean distance to its old neighbours over that to its new ones (1 when none was replaced).
 */
export function neighbourChange(frameA, frameB, n, k) {
  const a = nearestNeighbours(frameA, n, k);
  const b = nearestNeighbours(frameB, n, k);
  const change = new Float32Array(n), drift = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const set = new Set(a.subarray(i * k, i * k + k));
    let kept = 0;
    for (let j = 0; j < k; j++) if (set.has(b[i * k + j])) kept++;
    change[i] = 1 - kept / k;
    const old = meanDistance(frameB, a, i, k), now = meanDistance(frameB, b, i, k);
    drift[i] = old === now ? 1 : old / now;
  }
  return { change, drift };
}

/** A factor as the movers list writes it: ``47.4×``, ``∞×`` for no end. */
function factorText(value) {
  return Number.isFinite(value) ? `${value.toFixed(1)}×` : '∞×';
}

/**
 * The movers box: two snapshots to compare, a find button (calls ``onFind``), and the top
 * movers (a row calls ``onPick`` with its point).
 */
export class MoversList {
  constructor(onPick, onFind) {
    this.onPick = onPick;
    this.from = el('select', { 'aria-label': 'movers from', title: 'The earlier snapshot' });
    this.to = el('select', { 'aria-label': 'movers to', title: 'The later snapshot' });
    this.list = el('div', { class: 'ls-movers' });
    this.title = el('h2', { text: 'Movers: nearest neighbours replaced' });
    // the top mover's factor in a sentence, once the movers are found
    this.example = el('div', { class: 'ls-hint', 'data-role': 'movers-example' });
    this.nodes = [
      this.title,
      el('div', { class: 'ls-hint', text: 'Of its nearest neighbours in the 2-D view, the share ' +
        'replaced between the two steps; of equal shares, the point whose old neighbours went ' +
        'farthest first ("old neighbours now": how far they lie from it at the later step, in ' +
        'multiples of how far its new ones lie).' }),
      el('div', { class: 'ls-bar' }, ['from ', this.from, ' to ', this.to,
        el('button', { text: 'find', onclick: onFind, title: 'List the points that moved most' })]),
      this.list,
      this.example,
    ];
  }

  /**
   * Offer the snapshots of ``steps``, ``k`` neighbours: from the one before the last to the
   * last, or the snapshots of indices ``chosen`` [from, to].
   */
  showSteps(steps, k, chosen = null) {
    this.k = k;
    this.title.textContent = `Movers: ${k} nearest neighbours replaced`;
    this.title.title = `The points whose ${k} nearest neighbours in the 2-D view changed most`;
    for (const s of [this.from, this.to]) {
      s.textContent = '';
      steps.forEach((step, i) => s.append(el('option', { value: i, text: `step ${step}` })));
    }
    this.from.value = chosen ? chosen[0] : Math.max(0, steps.length - 2);
    this.to.value = chosen ? chosen[1] : steps.length - 1;
    this.list.textContent = '';
    this.example.textContent = '';
  }

  /** The trainer steps [from, to] chosen among ``steps`` (those offered). */
  chosenSteps(steps) {
    return [steps[+this.from.value], steps[+this.to.value]];
  }

  /**
   * List the top movers of embedding ``e`` between the chosen snapshots: most neighbours
   * replaced, then largest drift (then in order); them as {id, change, drift}.
   */
  find(e) {
    const a = +this.from.value, b = +this.to.value;
    const n = e.ids.length;
    const { change, drift } = neighbourChange(e.frames[a], e.frames[b], n, Math.min(e.neighbours, n - 1));
    const order = Array.from({ length: n }, (_, i) => i)
      .sort((i, j) => change[j] - change[i] || drift[j] - drift[i] || i - j);
    const top = order.slice(0, LISTED);
    const label = e.columns[0];
    const [from, to] = this.chosenSteps(e.steps), k = e.neighbours;
    this.list.textContent = '';
    this.list.append(el('table', {}, [
      el('tr', {}, [el('th', { text: 'id', title: "the point's id" }),
        el('th', { text: label ? label.name : '', title: label ? `its ${label.name}` : '' }),
        el('th', { text: 'replaced', title: `the share of its ${k} nearest neighbours of step ` +
          `${from} that are no longer among its ${k} nearest at step ${to}` }),
        el('th', { text: 'old neighbours now', title: `At step ${to}: the mean distance from the ` +
          `point to its ${k} neighbours of step ${from}, in multiples of its mean distance to ` +
          `its ${k} nearest at step ${to} (1× as far: they are as near as its nearest)` })]),
      ...top.map((i) => el('tr', { class: 'ls-click', onclick: () => this.onPick(i) }, [
        el('td', { text: e.ids[i] }),
        el('td', { text: label ? columnText(label, i) : '' }),
        el('td', { text: `${Math.round(change[i] * 100)}%` }),
        el('td', { text: `${factorText(drift[i])} as far` }),
      ])),
    ]));
    const first = top[0];
    this.example.textContent = first === undefined ? '' : `Point ${e.ids[first]}: at step ` +
      `${to}, its ${k} neighbours of step ${from} lie on average ${factorText(drift[first])} as ` +
      `far from it as its ${k} nearest do.`;
    return top.map((i) => ({ id: e.ids[i], change: change[i], drift: drift[i] }));
  }
}
