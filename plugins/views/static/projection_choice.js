// The projection the page shows, shared: aligned PCA or aligned UMAP, picked in the embedding
// panel's projection menu (the page's one menu); the comparison of two runs follows it.

/**
 * A shared projection choice: ``set(name, from)`` changes it ('pca', 'umap'); every subscriber
 * hears it, with the panel that changed it (``from``, or null).
 */
export class ProjectionChoice {
  constructor(name = 'pca') {
    this.name = name;
    this.listeners = [];
  }

  /** Call ``listener(name, from)`` at every change; returns a function that stops it. */
  subscribe(listener) {
    this.listeners.push(listener);
    return () => { this.listeners = this.listeners.filter((l) => l !== listener); };
  }

  /** Show projection ``name`` (a panel ``from`` chose it). */
  set(name, from = null) {
    if (name === this.name) return;
    this.name = name;
    for (const listener of this.listeners) listener(name, from);
  }
}
