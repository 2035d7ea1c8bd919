// Movers: the points whose nearest neighbours changed most between two snapshots.

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
