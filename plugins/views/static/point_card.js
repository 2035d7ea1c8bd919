// What the scatter says about one point: the tooltip on hover and the pinned point's box, each
// with the point's metadata and its thumbnail (from the embedding's sprite).

import { columnText, el, setupCanvas } from './dom.js';

/** The tooltip ``tip`` (shared by the view's panels) and the pinned point's box, ``element``. */
export class PointCard {
  constructor(tip) {
    this.tip = tip;
    this.element = el('div', { title: 'The pinned point: its id and metadata' });
    this.embedding = null;
    this.sprite = null; // the sprite image, once loaded
  }

  /** Describe the points of embedding ``e`` (its sprite loads in the background). */
  showEmbedding(e) {
    this.embedding = e;
    this.sprite = null;
    this.element.textContent = '';
    if (e.sprite) {
      const img = new Image();
      img.onload = () => { if (this.embedding === e) this.sprite = img; };
      img.src = e.sprite.png;
    }
  }

  describe(k) {
    const e = this.embedding;
    return [`id ${e.ids[k]}`, ...e.columns.map((c) => `${c.name}: ${columnText(c, k)}`)];
  }

  thumbnail(k) {
    const s = this.embedding.sprite;
    if (!s || !this.sprite) return null;
    const row = s.rows[k];
    const canvas = el('canvas');
    const ctx = setupCanvas(canvas, 48, 48);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.sprite, (row % s.per_row) * s.width, Math.floor(row / s.per_row) * s.height,
      s.width, s.height, 0, 0, 48, 48);
    return canvas;
  }

  /** The tooltip of point ``k`` beside the mouse event ``ev`` (none for null); its text. */
  showTip(k, ev) {
    const tip = this.tip;
    if (k == null) {
      tip.style.display = 'none';
      return '';
    }
    tip.textContent = '';
    tip.append(...this.describe(k).map((t) => el('div', { text: t })));
    const thumb = this.thumbnail(k);
    if (thumb) tip.append(thumb);
    tip.style.left = ev.clientX + 14 + 'px';
    tip.style.top = ev.clientY + 10 + 'px';
    tip.style.display = 'block';
    return tip.textContent;
  }

  /** The pinned point's box for point ``k`` (empty for null); ``unpin`` called by its button. */
  showPinned(k, unpin) {
    this.element.textContent = '';
    if (k == null) return;
    this.element.append(el('h2', { text: 'Pinned point' }),
      ...this.describe(k).map((t) => el('div', { text: t })),
      el('div', { style: 'color:#616161', text: `its path: ■ step ${this.embedding.steps[0]} to now` }),
      el('button', { text: 'unpin', onclick: unpin, title: 'Unpin this point' }));
    const thumb = this.thumbnail(k);
    if (thumb) this.element.append(thumb);
  }
}
