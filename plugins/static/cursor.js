// The step the panels show, shared: panels subscribe to it instead of calling each other.

/**
 * A shared step cursor.
 *
 * ``show(step, from)`` says which trainer step a panel now shows; every subscriber hears it
 * (with who moved it). ``request(step)`` asks to go to a step (a finding's, say): the panel that
 * steers the cursor (the embedding slider, which snaps to its snapshots) answers it, else the
 * step is shown as asked.
 */
export class StepCursor {
  constructor() {
    this.step = null;
    this.steer = null;
    this.listeners = [];
  }

  /** Call ``listener(step, from)`` on every shown step; returns a function that stops it. */
  subscribe(listener) {
    this.listeners.push(listener);
    return () => { this.listeners = this.listeners.filter((l) => l !== listener); };
  }

  show(step, from) {
    this.step = step;
    for (const listener of this.listeners) listener(step, from);
  }

  request(step) {
    if (this.steer) this.steer(step);
    else this.show(step, null);
  }
}
