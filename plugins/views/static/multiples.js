// Small multiples: the chosen runs' embeddings of one key side by side, one small panel each, on
// the ids they all share, each turned onto the first run's (the reference) by orthogonal
// Procrustes, in one frame (the same scale in every panel), coloured by one column of the
// reference (the label by default) with one legend. Every panel shows its run's newest snapshot
// at or before the page's step cursor (its first when none is that early, said so) and follows
// the cursor and the page's projection menu (PCA, or UMAP where every chosen run has it).
//
// Computed here, in the page, from the runs' views (source.view(name)): the learnscope tab and an
// exported page (which holds every run's view already, so the small multiples of any chosen runs
// add nothing to its size) show the same panels by the same code. The alignment is the two-run
// comparison's rule (learnscope.embeddings.neighbourhoods: in_spreads, procrustes_rotation),
// generalised to N runs: each view centred on the shared points and in units of its spread (the
// root-mean-square distance from the centre), then rotated (or reflected, never scaled) onto the
// reference's. tests/views/test_small_multiples.py checks it against numpy's SVD.

import { colourScheme, groupByColour } from './colours.js';
import { relation, shownIndex } from './cursor.js';
import { columnText, el, setupCanvas } from './dom.js';
import { showLegend } from './legend.js';
import { decodeHalf } from './model.js';
import { drawPoints, drawRing, frameMapping, nearestPoint, screenPositions } from './scatter.js';

const MULTIPLE_SIDE = 240; // CSS pixels of each panel's canvas
const MULTIPLE_POINT = 2; // half the side of a drawn point, CSS pixels
const MULTIPLE_ROOM = 1.1; // the frame's half-width: the farthest point's reach times this
const MULTIPLE_NEIGHBOURS = 10; // the comparison's k, where a view does not say its own

/**
 * ``xy`` (a flat [x0, y0, x1, y1, ...] array) centred on its finite points and in units of its
 * spread (their root-mean-square distance from the centre), as a Float64Array; non-finite points
 * stay non-finite. The comparison's ``in_spreads``.
 */
export function inSpreads(xy) {
  const n = xy.length >> 1;
  let cx = 0, cy = 0, count = 0;
  for (let i = 0; i < n; i++) {
    const x = xy[2 * i], y = xy[2 * i + 1];
    if (Number.isFinite(x) && Number.isFinite(y)) { cx += x; cy += y; count++; }
  }
  if (count) { cx /= count; cy /= count; }
  const out = new Float64Array(2 * n);
  let squares = 0;
  for (let i = 0; i < n; i++) {
    out[2 * i] = xy[2 * i] - cx;
    out[2 * i + 1] = xy[2 * i + 1] - cy;
    if (Number.isFinite(out[2 * i]) && Number.isFinite(out[2 * i + 1])) {
      squares += out[2 * i] ** 2 + out[2 * i + 1] ** 2;
    }
  }
  const spread = count ? Math.sqrt(squares / count) : 0;
  const scale = spread > 0 && Number.isFinite(spread) ? spread : 1;
  for (let i = 0; i < out.length; i++) out[i] /= scale;
  return out;
}

/**
 * The orthogonal 2 x 2 matrix ``R`` (a rotation or a reflection) that brings ``b R`` nearest
 * ``a`` (flat [x0, y0, ...] arrays of the same points), over the points finite in both: the
 * comparison's ``procrustes_rotation`` (``U V^T`` of the SVD of ``b^T a``), in closed form. Of
 * the rotations the best turns by the angle of (tr M, M10 - M01), of the reflections by that of
 * (M00 - M11, M01 + M10), for M = b^T a; the larger of the two lengths wins (their squares
 * differ by 4 det M, so the sign of det M decides, as the SVD's U V^T does).
 */
export function procrustesRotation(b, a) {
  let m00 = 0, m01 = 0, m10 = 0, m11 = 0;
  for (let i = 0; i < a.length; i += 2) {
    const bx = b[i], by = b[i + 1], ax = a[i], ay = a[i + 1];
    if (![bx, by, ax, ay].every(Number.isFinite)) continue;
    m00 += bx * ax; m01 += bx * ay; m10 += by * ax; m11 += by * ay;
  }
  const turn = Math.hypot(m00 + m11, m10 - m01), flip = Math.hypot(m00 - m11, m01 + m10);
  if (turn === 0 && flip === 0) return [[1, 0], [0, 1]];
  if (turn >= flip) {
    const c = (m00 + m11) / turn, s = (m10 - m01) / turn;
    return [[c, -s], [s, c]];
  }
  const c = (m00 - m11) / flip, s = (m01 + m10) / flip;
  return [[c, s], [s, -c]];
}

/** ``xy`` (flat) times the 2 x 2 matrix ``r``, as a Float64Array. */
function turned(xy, r) {
  const out = new Float64Array(xy.length);
  for (let i = 0; i < xy.length; i += 2) {
    out[i] = xy[i] * r[0][0] + xy[i + 1] * r[1][0];
    out[i + 1] = xy[i] * r[0][1] + xy[i + 1] * r[1][1];
  }
  return out;
}

/** The ids every one of ``idLists`` holds, in the first list's order. */
export function sharedIds(idLists) {
  if (!idLists.length) return [];
  const others = idLists.slice(1).map((ids) => new Set(ids));
  return idLists[0].filter((id) => others.every((set) => set.has(id)));
}

/** "a", "a and b", "a, b and c". */
function listed(names) {
  return names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;
}

/** Column ``c`` (of a view's key: one value per shown id) at ``rows`` only. */
function columnAt(c, rows) {
  if (c.kind === 'categorical') return { ...c, codes: Array.from(rows, (r) => c.codes[r]) };
  return { ...c, values: Array.from(rows, (r) => c.values[r]) };
}

/**
 * The small multiples of the runs ``show`` is given, in ``box`` (the page places it), following
 * the step cursor and the projection choice it is given; ``source`` is the view's data source
 * ({view(name)}), ``tip`` its tooltip. ``state`` (for tests): ready, runs, key, keys (the key
 * menu: those every run has first), the cursor's step, shared (the ids every run with the key
 * holds, in the reference's order), projection drawn and asked, colourBy, legend, messages, and
 * per panel: run, step shown, steps, message (why it is empty), drawn points, rotation (onto
 * the reference; the identity for it) and residual (root-mean-square distance from the
 * reference, in spreads). ``close()`` stops following.
 */
export class SmallMultiples {
  constructor({ source, tip }) {
    this.source = source;
    this.tip = tip;
    this.box = el('div', { 'data-role': 'multiples-box' });
    this.ticket = 0; // the newest show(); older answers are dropped
    this.stops = [];
    this.panels = [];
    this.state = { ready: false };
  }

  /** Stop following the cursor and the projection choice, and empty the box. */
  close() {
    for (const stop of this.stops) stop();
    this.stops = [];
    this.ticket++;
    this.box.textContent = '';
    this.panels = [];
    this.state = { ready: false };
  }

  /**
   * Show runs ``runNames`` (two or more, the first the reference) at the step ``cursor``'s step,
   * in the ``projection`` choice's projection; then follow both.
   */
  async show(runNames, cursor = null, projection = null) {
    this.close();
    const ticket = this.ticket;
    if (!runNames || runNames.length < 2) return null;
    this.box.textContent = 'Loading the runs…';
    const views = await Promise.all(runNames.map((name) => this.source.view(name)));
    if (ticket !== this.ticket) return null;
    this.runs = runNames.map((name, i) => ({ name, view: views[i] || { embeddings: [], messages: [] } }));
    this.cursor = cursor;
    this.projection = projection;
    this.decoded = new Map(); // "run/key/projection/index" -> Float32Array
    const keyLists = this.runs.map((r) => (r.view.embeddings || []).map((e) => e.key));
    const all = [...new Set(keyLists.flat())];
    const everywhere = all.filter((k) => keyLists.every((keys) => keys.includes(k)));
    this.keys = [...everywhere, ...all.filter((k) => !everywhere.includes(k))];
    this.key = this.keys[0] || null;
    this.colourName = undefined; // the label by default
    this.build(everywhere);
    if (cursor) this.stops.push(cursor.subscribe(() => this.update()));
    if (projection) this.stops.push(projection.subscribe(() => this.update()));
    this.update();
    this.state.ready = true;
    return this;
  }

  build(everywhere) {
    this.box.textContent = '';
    const section = el('section', { 'data-role': 'multiples' });
    this.heading = el('h2');
    this.keySelect = el('select', { 'aria-label': 'multiples key',
      title: 'The key shown in every panel: those every chosen run has first',
      onchange: () => { this.key = this.keySelect.value; this.update(); } },
    this.keys.map((k) => el('option', { value: k,
      text: everywhere.includes(k) ? k : `${k} (not in every run)` })));
    this.colourSelect = el('select', { 'aria-label': 'multiples colour by',
      title: "What colours the points in every panel: a metadata column of the reference run's",
      onchange: () => { this.colourName = this.colourSelect.value || null; this.update(); } });
    this.projectionShown = el('span', { 'data-role': 'multiples-projection' });
    this.messages = el('div');
    this.legend = el('div', { class: 'ls-legend', 'data-role': 'multiples-legend' });
    this.grid = el('div', { style: 'display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start' });
    section.append(this.heading,
      el('div', { class: 'ls-hint', text: 'Each panel is one run; each dot one input every ' +
        "run saw. Every panel is turned onto the first run's (orthogonal Procrustes: both " +
        'centred, in units of their spread) and drawn in one frame, so that the pictures can ' +
        "be read side by side. It follows the step cursor and the page's projection menu." }),
      el('div', { class: 'ls-bar' }, [el('label', {}, ['key ', this.keySelect]),
        el('label', {}, ['colour by ', this.colourSelect]), this.projectionShown]),
      this.messages, this.legend, this.grid);
    this.box.append(section);
  }

  /** The run's embedding of the key shown, or null. */
  embeddingOf(run) {
    return (run.view.embeddings || []).find((e) => e.key === this.key) || null;
  }

  /** The decoded coordinates of ``run``'s snapshot ``index`` of ``e`` in ``projection``. */
  coordinates(run, e, name, index) {
    const id = `${run.name}\u0000${e.key}\u0000${name}\u0000${index}`;
    if (!this.decoded.has(id)) {
      const p = name === 'pca' ? e : e.projections.find((q) => q.name === name);
      this.decoded.set(id, decodeHalf(p.xy[index]));
    }
    return this.decoded.get(id);
  }

  /** Compute and draw every panel at the cursor's step, in the projection asked for. */
  update() {
    const step = this.cursor ? this.cursor.step : null;
    const asked = this.projection ? this.projection.name : 'pca';
    const messages = [];
    const panels = this.runs.map((run) => {
      const e = this.embeddingOf(run);
      const panel = { run: run.name, e, step: null, steps: e ? e.steps : [], message: null,
        drawn: 0, rotation: null, residual: null, xy: null };
      if (!e) {
        const keys = (run.view.embeddings || []).map((x) => x.key);
        panel.message = `run ${run.name} has no snapshot of ${this.key} (keys: ${keys.join(', ') || 'none'})`;
      } else if (!e.steps.length) {
        panel.message = `run ${run.name} has no snapshot of ${this.key}`;
      } else {
        panel.index = step == null ? e.steps.length - 1 : shownIndex(e.steps, step);
        panel.step = e.steps[panel.index];
        if (step != null && panel.step > step) {
          messages.push(`run ${run.name} has no snapshot of ${this.key} at or before step ` +
            `${step}: its first, step ${panel.step}, is shown`);
        }
      }
      if (panel.message) messages.push(panel.message);
      return panel;
    });
    if (this.key == null) {
      messages.length = 0;
      messages.push(`none of runs ${listed(panels.map((p) => p.run))} has a snapshot of an embedding`);
      for (const p of panels) p.message = `run ${p.run} has no snapshot (keys: none)`;
    }
    const present = panels.filter((p) => p.e && p.step != null);
    // the projection: the one asked for where every run with the key has it at its step
    const without = present.filter((p) => asked !== 'pca' && !this.projectionIndex(p, asked).ok);
    const name = asked !== 'pca' && present.length && !without.length ? asked : 'pca';
    if (asked !== 'pca' && without.length) {
      messages.push(`the page shows ${asked.toUpperCase()}; ${listed(without.map((p) => p.run))} ` +
        `${without.length > 1 ? 'have' : 'has'} no aligned ${asked.toUpperCase()} view at the ` +
        'step shown, so the panels show PCA');
    }
    const shared = sharedIds(present.map((p) => p.e.ids));
    const reference = panels[0].e && panels[0].step != null ? panels[0] : null;
    // as the comparison of two runs: at least k + 1 shared ids (k: the view's neighbours)
    const least = (reference ? reference.e.neighbours || MULTIPLE_NEIGHBOURS : MULTIPLE_NEIGHBOURS) + 1;
    if (this.key == null) {
      // said above
    } else if (!reference) {
      messages.push(`the reference run ${panels[0].run} has no snapshot of ${this.key}: ` +
        'the panels cannot be turned onto it');
    } else if (present.length < 2) {
      messages.push(`only run ${reference.run} has a snapshot of ${this.key}: nothing to set beside it`);
    } else if (shared.length < least) {
      messages.push(`runs ${listed(present.map((p) => p.run))} share ${shared.length.toLocaleString()} ` +
        `of ${present.map((p) => p.e.ids.length.toLocaleString()).join('/')} ids of key ${this.key}: ` +
        `need at least ${least}`);
    } else {
      this.align(present, reference, shared, name);
    }
    if (present.some((p) => (p.e.notes || []).includes('no ids: points matched by row'))) {
      messages.push('no ids: points matched by row');
    }
    this.panels = panels;
    this.shared = reference && present.length >= 2 && shared.length >= least ? shared : [];
    this.projectionName = name;
    this.heading.textContent = `Side by side: ${this.key || 'no tag'} of ${panels.length} runs` +
      (this.shared.length ? ` on the ${this.shared.length.toLocaleString()} ids they share` : '') +
      ` (aligned ${name.toUpperCase()})`;
    this.projectionShown.textContent = `projection ${name.toUpperCase()}`;
    this.messages.textContent = '';
    for (const m of messages) {
      this.messages.append(el('div', { class: 'ls-msg', 'data-role': 'multiples-message', text: m }));
    }
    this.colourColumns(reference);
    this.drawGrid(step);
    Object.assign(this.state, {
      runs: panels.map((p) => p.run), key: this.key, keys: this.keys.slice(), cursor: step,
      shared: this.shared.slice(), projection: name, projectionAsked: asked,
      colourBy: this.column ? this.column.name : null, legend: this.legendShown, messages,
      panels: panels.map((p) => ({ run: p.run, step: p.step, steps: p.steps.slice(),
        message: p.message, drawn: p.drawn, rotation: p.rotation, residual: p.residual })),
      hovered: null, tooltip: '',
    });
  }

  /** Where panel ``p``'s snapshot is in projection ``name``'s steps (``ok``: it has it). */
  projectionIndex(p, name) {
    const q = (p.e.projections || []).find((x) => x.name === name);
    const index = q ? q.steps.indexOf(p.step) : -1;
    return { ok: index >= 0, index };
  }

  /** Turn every present panel's view (``name``) on the ``shared`` ids onto the reference's. */
  align(present, reference, shared, name) {
    let reach = 0;
    const views = present.map((p) => {
      const index = name === 'pca' ? p.index : this.projectionIndex(p, name).index;
      const xy = this.coordinates(this.runs.find((r) => r.name === p.run), p.e, name, index);
      const row = new Map(p.e.ids.map((id, i) => [id, i]));
      const picked = new Float64Array(2 * shared.length);
      shared.forEach((id, i) => {
        const r = row.get(id);
        picked[2 * i] = xy[2 * r];
        picked[2 * i + 1] = xy[2 * r + 1];
      });
      p.rows = Int32Array.from(shared, (id) => row.get(id));
      return inSpreads(picked);
    });
    const target = views[present.indexOf(reference)];
    present.forEach((p, i) => {
      p.rotation = p === reference ? [[1, 0], [0, 1]] : procrustesRotation(views[i], target);
      p.xy = p === reference ? views[i] : turned(views[i], p.rotation);
      let squares = 0, count = 0;
      for (let k = 0; k < p.xy.length; k += 2) {
        const dx = p.xy[k] - target[k], dy = p.xy[k + 1] - target[k + 1];
        if (Number.isFinite(dx) && Number.isFinite(dy)) { squares += dx * dx + dy * dy; count++; }
        const far = Math.max(Math.abs(p.xy[k]), Math.abs(p.xy[k + 1]));
        if (Number.isFinite(far) && far > reach) reach = far;
      }
      p.residual = count ? Math.sqrt(squares / count) : null;
    });
    const half = (reach || 1) * MULTIPLE_ROOM;
    this.frame = [-half, half, -half, half];
  }

  /** The colour menu (the reference's columns) and the column that colours the shared points. */
  colourColumns(reference) {
    const columns = reference ? reference.e.columns || [] : [];
    if (this.colourName === undefined) {
      this.colourName = columns.some((c) => c.name === 'label') ? 'label' : null;
    }
    this.colourSelect.textContent = '';
    this.colourSelect.append(el('option', { value: '', text: '(none)' }),
      ...columns.map((c) => el('option', { value: c.name, text: c.name })));
    const column = columns.find((c) => c.name === this.colourName) || null;
    this.colourSelect.value = column ? column.name : '';
    this.column = column && this.shared.length ? columnAt(column, reference.rows) : null;
    const scheme = colourScheme(this.column, this.shared.length);
    this.legendShown = showLegend(this.legend, this.column, scheme);
    this.colours = scheme.colours;
    this.groups = groupByColour(scheme.bucket, scheme.colours.length);
  }

  /** One small panel per run: its caption, its picture or why it has none. */
  drawGrid(step) {
    this.grid.textContent = '';
    const mapping = this.frame ? frameMapping(this.frame, MULTIPLE_SIDE, MULTIPLE_SIDE) : null;
    this.panels.forEach((p, side) => {
      const caption = p.step == null ? p.run
        : `${p.run}${side === 0 ? ' (reference)' : ''}, step ${p.step}${relation(p.step, step)}`;
      const children = [el('div', { 'data-role': 'multiples-caption', text: caption,
        style: `max-width:${MULTIPLE_SIDE}px` })];
      if (p.xy && this.shared.length) {
        const canvas = el('canvas', { class: 'ls-pick', 'data-run': p.run });
        p.ctx = setupCanvas(canvas, MULTIPLE_SIDE, MULTIPLE_SIDE);
        p.canvas = canvas;
        p.positions = screenPositions({ ids: this.shared, frames: [p.xy], bounds: this.frame }, 0, mapping);
        canvas.addEventListener('mousemove', (ev) => {
          const r = canvas.getBoundingClientRect();
          this.hover(nearestPoint(p.positions, this.shared.length, ev.clientX - r.left, ev.clientY - r.top), ev);
        });
        canvas.addEventListener('mouseleave', () => this.hover(null, null));
        children.push(canvas);
      } else {
        const why = p.message || (p.step == null ? '' : 'not drawn: see the messages above');
        children.push(el('div', { class: 'ls-hint', 'data-role': 'multiples-empty', text: why,
          style: `width:${MULTIPLE_SIDE}px` }));
      }
      this.grid.append(el('div', { 'data-role': 'multiples-panel', 'data-run': p.run }, children));
    });
    this.hovered = null;
    this.draw();
  }

  draw() {
    for (const p of this.panels) {
      if (!p.ctx || !p.positions) continue;
      p.ctx.clearRect(0, 0, MULTIPLE_SIDE, MULTIPLE_SIDE);
      p.drawn = drawPoints(p.ctx, p.positions, this.groups, this.colours, MULTIPLE_POINT);
      if (this.hovered != null) drawRing(p.ctx, p.positions, this.hovered, '#ff6f00');
    }
  }

  /** Ring shared point ``k`` (or none) in every panel, its tooltip at the mouse event ``ev``. */
  hover(k, ev) {
    this.hovered = k;
    if (k == null || !ev) {
      this.tip.style.display = 'none';
    } else {
      this.tip.textContent = '';
      const lines = [`id ${this.shared[k]}`, ...(this.column ? [`${this.column.name}: ${columnText(this.column, k)}`] : [])];
      this.tip.append(...lines.map((t) => el('div', { text: t })));
      this.tip.style.left = ev.clientX + 14 + 'px';
      this.tip.style.top = ev.clientY + 10 + 'px';
      this.tip.style.display = 'block';
    }
    Object.assign(this.state, { hovered: k, tooltip: k == null ? '' : this.tip.textContent });
    this.draw();
  }
}
