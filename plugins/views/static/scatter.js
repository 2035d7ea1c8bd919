// Drawing the embedding scatter: from a snapshot's coordinates (in spreads) to canvas pixels.

/** One scale for x and y (the frame keeps its shape), the frame centred on the canvas. */
export function frameMapping(bounds, width, height) {
  const [x0, x1, y0, y1] = bounds;
  const scale = Math.min(width / (x1 - x0), height / (y1 - y0));
  return { scale, left: (width - (x1 - x0) * scale) / 2, top: (height - (y1 - y0) * scale) / 2 };
}

/** Canvas position of point ``k`` of ``frame`` (outside the bounds: on their edge). */
export function toScreen(bounds, mapping, frame, k) {
  const [x0, x1, y0, y1] = bounds;
  const x = Math.min(x1, Math.max(x0, frame[2 * k])), y = Math.min(y1, Math.max(y0, frame[2 * k + 1]));
  return [mapping.left + (x - x0) * mapping.scale, mapping.top + (y1 - y) * mapping.scale];
}

/** Canvas position [x, y] of point ``k`` of embedding ``e`` at ``position``, as screenPositions. */
export function screenPosition(e, position, mapping, k) {
  const i = Math.floor(position), f = position - i;
  const a = e.frames[i], b = e.frames[Math.min(i + 1, e.frames.length - 1)];
  const at = [a[2 * k] + (b[2 * k] - a[2 * k]) * f, a[2 * k + 1] + (b[2 * k + 1] - a[2 * k + 1]) * f];
  return toScreen(e.bounds, mapping, at, 0);
}

/**
 * Canvas positions of every point of embedding ``e`` at ``position`` (a fractional snapshot
 * index: between two snapshots, the points are interpolated), written into ``out`` when it fits.
 */
export function screenPositions(e, position, mapping, out) {
  const n = e.ids.length;
  const i = Math.floor(position), f = position - i;
  const a = e.frames[i], b = e.frames[Math.min(i + 1, e.frames.length - 1)];
  const [x0, x1, y0, y1] = e.bounds;
  const { scale, left, top } = mapping;
  const pos = out && out.length === 2 * n ? out : new Float32Array(2 * n);
  for (let k = 0; k < n; k++) {
    // Points outside the frame are drawn on its edge, as in the Images-tab picture.
    const x = Math.min(x1, Math.max(x0, a[2 * k] + (b[2 * k] - a[2 * k]) * f));
    const y = Math.min(y1, Math.max(y0, a[2 * k + 1] + (b[2 * k + 1] - a[2 * k + 1]) * f));
    pos[2 * k] = left + (x - x0) * scale;
    pos[2 * k + 1] = top + (y1 - y) * scale;
  }
  return pos;
}

/** Draw the points at ``pos`` as squares of half-size ``r``, by colour; how many were drawn. */
export function drawPoints(ctx, pos, groups, colours, r) {
  let drawn = 0;
  for (let c = 0; c < groups.length; c++) {
    const g = groups[c];
    if (!g.length) continue;
    ctx.fillStyle = colours[c];
    ctx.beginPath();
    for (let j = 0; j < g.length; j++) {
      const k = g[j];
      const x = pos[2 * k], y = pos[2 * k + 1];
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      ctx.rect(x - r, y - r, 2 * r, 2 * r);
      drawn++;
    }
    ctx.fill();
  }
  return drawn;
}

/** A ring around point ``k``. */
export function drawRing(ctx, pos, k, colour) {
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.beginPath();
  ctx.arc(pos[2 * k], pos[2 * k + 1], 6, 0, 2 * Math.PI);
  ctx.stroke();
}

/** Each point's way over the last three snapshots before snapshot ``i``, to where it is now. */
export function drawTrails(ctx, e, i, mapping, pos) {
  const from = Math.max(0, i - 3);
  ctx.strokeStyle = 'rgba(120,120,120,0.35)';
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let k = 0; k < e.ids.length; k++) {
    let [x, y] = toScreen(e.bounds, mapping, e.frames[from], k);
    ctx.moveTo(x, y);
    for (let s = from + 1; s <= i; s++) { [x, y] = toScreen(e.bounds, mapping, e.frames[s], k); ctx.lineTo(x, y); }
    ctx.lineTo(pos[2 * k], pos[2 * k + 1]);
  }
  ctx.stroke();
}

/** Point ``k``'s way through every snapshot, its start marked; the start's canvas position. */
export function drawPath(ctx, e, k, mapping) {
  ctx.strokeStyle = 'rgba(0,0,0,0.6)';
  ctx.lineWidth = 1;
  ctx.beginPath();
  e.frames.forEach((f, s) => {
    const [x, y] = toScreen(e.bounds, mapping, f, k);
    if (s === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
  const start = toScreen(e.bounds, mapping, e.frames[0], k);
  ctx.fillStyle = '#000'; // the start: a black square
  ctx.fillRect(start[0] - 3.5, start[1] - 3.5, 7, 7);
  return start;
}

/** The point nearest (mx, my), within 8 pixels, or null. */
export function nearestPoint(pos, n, mx, my) {
  let best = null, bestD = 64;
  for (let k = 0; k < n; k++) {
    const dx = pos[2 * k] - mx, dy = pos[2 * k + 1] - my;
    const d = dx * dx + dy * dy;
    if (d < bestD) { bestD = d; best = k; }
  }
  return best;
}
