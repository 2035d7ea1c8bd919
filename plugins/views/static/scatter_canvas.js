// The scatter's picture: three canvases stacked. At the back (2-D) the frame; in the middle the
// points with their trails behind them, drawn by the GPU (scatter_gl.js, WebGL) or, where the
// browser has no WebGL or the 2-D canvas is asked for, with scatter.js's 2-D helpers (the
// trails then on the back canvas, as they are where WebGL runs on the CPU); in front (2-D, it takes the mouse) the hover and pin rings
// and the pinned point's path. The canvas positions of the points are computed on the CPU only
// when asked for (hover, tests, or the 2-D renderer).

import { groupByColour } from './colours.js';
import { el, setupCanvas } from './dom.js';
import { GLPoints } from './scatter_gl.js';
import {
  drawPath, drawPoints, drawRing, drawTrails, frameMapping, nearestPoint, screenPosition, screenPositions,
} from './scatter.js';

// The layers above the back one: on it exactly (the same 1-pixel border, transparent).
const LAYER = 'position:absolute;left:0;top:0;background:transparent;border-color:transparent';

/** Half the side of a point's square, in CSS pixels: smaller when there are many. */
export function pointRadius(n) {
  return n > 2000 ? 1.5 : 2.5;
}

/**
 * The scatter of ``width`` x ``height`` CSS pixels in ``element``. ``renderer`` 'webgl' (the
 * default) draws the points with WebGL where the browser has it, 'canvas' with the 2-D canvas;
 * ``renderer`` says which draws. ``onLost`` is called if the browser takes the WebGL context away.
 * ``trails`` 'auto' draws the trails with WebGL when a GPU draws it and on the 2-D canvas when
 * the CPU does (software WebGL spends more per line vertex than the 2-D canvas: BENCHMARKS.md),
 * 'webgl' or 'canvas' asks for one; ``trailsRenderer`` says which draws them.
 */
export class ScatterCanvas {
  constructor(width, height, renderer = 'webgl', onLost = null, trails = 'auto') {
    this.width = width;
    this.height = height;
    this.element = el('div', { style: 'position:relative;flex:none' });
    const back = el('canvas', { 'data-role': 'scatter-back' });
    this.back = setupCanvas(back, width, height);
    const points = el('canvas', { 'data-role': 'scatter-points', style: LAYER });
    const ratio = window.devicePixelRatio || 1;
    points.width = Math.round(width * ratio);
    points.height = Math.round(height * ratio);
    Object.assign(points.style, { width: width + 'px', height: height + 'px' });
    this.gl = renderer === 'canvas' ? null : GLPoints.create(points);
    this.ctx = this.gl ? null : setupCanvas(points, width, height);
    this.glTrails = Boolean(this.gl) && (trails === 'webgl' || (trails === 'auto' && !this.gl.software));
    if (this.gl && onLost) points.addEventListener('webglcontextlost', (ev) => { ev.preventDefault(); onLost(); });
    this.canvas = el('canvas', { 'data-role': 'scatter', style: LAYER });
    this.front = setupCanvas(this.canvas, width, height);
    this.element.append(back, points, this.canvas);
    this.scheme = { groups: [], colours: [] };
    this.cache = null; // the CPU positions: {e, position, pos}
  }

  get renderer() { return this.gl ? 'webgl' : 'canvas'; }

  get trailsRenderer() { return this.glTrails ? 'webgl' : 'canvas'; }

  /** Colour point k with ``colours[bucket[k]]`` (CSS colours). */
  setColours(bucket, colours) {
    if (this.gl) this.gl.setColours(bucket, colours);
    this.scheme = { groups: this.gl ? [] : groupByColour(bucket, colours.length), colours };
  }

  mapping(e) {
    return frameMapping(e.bounds, this.width, this.height);
  }

  /** The canvas positions of the points of ``e`` at ``position`` (computed once per position). */
  positions(e, position) {
    const c = this.cache;
    if (c && c.e === e && c.position === position) return c.pos;
    const pos = screenPositions(e, position, this.mapping(e), c && c.pos);
    this.cache = { e, position, pos };
    return pos;
  }

  /**
   * Draw embedding ``e`` at fractional snapshot index ``position``, with its ``trails`` (a
   * boolean), rings around the ``pinned`` and ``hovered`` points (or null) and the pinned
   * point's path; {drawn: how many points were drawn, pathStart: the path's start or null}.
   */
  draw(e, position, { trails, pinned, hovered }) {
    const mapping = this.mapping(e);
    const back = this.back, front = this.front;
    back.clearRect(0, 0, this.width, this.height);
    const [x0, x1, y0, y1] = e.bounds;
    back.strokeStyle = '#eeeeee';
    back.lineWidth = 1;
    back.strokeRect(mapping.left, mapping.top, (x1 - x0) * mapping.scale, (y1 - y0) * mapping.scale);
    const r = pointRadius(e.ids.length);
    let drawn;
    if (trails && !this.glTrails) drawTrails(back, e, Math.floor(position), mapping, this.positions(e, position));
    if (this.gl) {
      drawn = this.gl.draw(e, position, mapping, this.width, this.height, 2 * r, trails && this.glTrails);
    } else {
      this.ctx.clearRect(0, 0, this.width, this.height);
      drawn = drawPoints(this.ctx, this.positions(e, position), this.scheme.groups, this.scheme.colours, r);
    }
    front.clearRect(0, 0, this.width, this.height);
    if (pinned != null) drawRing(front, screenPosition(e, position, mapping, pinned), 0, '#000');
    if (hovered != null) drawRing(front, screenPosition(e, position, mapping, hovered), 0, '#d50000');
    const pathStart = pinned == null ? null : drawPath(front, e, pinned, mapping);
    return { drawn, pathStart };
  }

  /** The point of ``e`` at ``position`` under the mouse event ``ev`` (within 8 pixels), or null. */
  pointAt(ev, e, position) {
    const rect = this.canvas.getBoundingClientRect();
    return nearestPoint(this.positions(e, position), e.ids.length, ev.clientX - rect.left, ev.clientY - rect.top);
  }

  /** The RGBA bytes of the points' layer at CSS pixel (x, y). */
  pixel(x, y) {
    const ratio = window.devicePixelRatio || 1;
    const px = Math.round(x * ratio), py = Math.round(y * ratio);
    return this.gl ? this.gl.pixel(px, py) : Array.from(this.ctx.getImageData(px, py, 1, 1).data);
  }
}
