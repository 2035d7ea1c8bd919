// Small DOM and canvas helpers shared by the panels.

/** An element: attributes (style, on<event> listeners, text, others as attributes), children. */
export function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'style') node.style.cssText = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of [].concat(children || [])) {
    if (child != null) node.append(child);
  }
  return node;
}

/** A canvas sized ``width`` x ``height`` CSS pixels, sharp on high-density screens; its 2-D context. */
export function setupCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = width + 'px';
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/**
 * A panel's section: its heading, then the one-line ``hint`` on how to read it, or, when it has
 * nothing to show (not ``has``), what the view says of ``section`` (``empty`` when nothing).
 */
export function panelSection(view, section, { title, has, hint, empty }) {
  const element = el('section', {}, [el('h2', { text: title })]);
  element.append(has
    ? el('div', { class: 'ls-hint', 'data-role': `hint-${section}`, text: hint })
    : el('div', { 'data-role': `status-${section}`, text: statusText(view, section, empty) }));
  return element;
}

/** What an empty section says: the view's status for it (capitalised), else ``fallback``. */
export function statusText(view, section, fallback) {
  const text = view.status && view.status[section];
  return text ? text.charAt(0).toUpperCase() + text.slice(1) + '.' : fallback;
}

/** The value of column ``c`` at point ``k`` as text ("other" for a point of no category). */
export function columnText(c, k) {
  if (c.kind === 'categorical') {
    const name = c.categories[c.codes[k]];
    return name === undefined ? 'other' : name;
  }
  const v = c.values[k];
  return v == null ? 'NaN' : String(v);
}
