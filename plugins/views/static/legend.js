// The legend of a scatter coloured by a metadata column: a swatch per category (and "other"),
// or a colour bar from the smallest to the largest number. The embedding scatter and the
// comparison of two runs show the same one for the same column.

import { OTHER_COLOUR, viridis } from './colours.js';
import { el, setupCanvas } from './dom.js';

/**
 * Fill ``element`` with the legend of ``scheme`` (colourScheme of ``column``; nothing for no
 * column); returns what it shows, as [{name, colour}] (a colour bar: its two ends).
 */
export function showLegend(element, column, scheme) {
  element.textContent = '';
  element.title = column ? `The colours: the values of ${column.name}` : '';
  const swatch = (colour, name) => el('span', {}, [
    el('span', { class: 'ls-swatch', style: `background:${colour}` }), name]);
  const shown = [];
  if (scheme.categories) {
    for (const c of scheme.categories) shown.push({ name: c.name, colour: c.colour });
    if (scheme.others) shown.push({ name: 'other', colour: OTHER_COLOUR });
    for (const s of shown) element.append(swatch(s.colour, s.name));
  } else if (scheme.range) {
    const [lo, hi] = scheme.range;
    const bar = el('canvas');
    const ctx = setupCanvas(bar, 160, 10);
    for (let i = 0; i < 160; i++) { ctx.fillStyle = viridis(i / 159); ctx.fillRect(i, 0, 1, 10); }
    element.append(el('span', {}, [`${lo.toPrecision(3)} `, bar, ` ${hi.toPrecision(3)}`]));
    shown.push({ name: lo.toPrecision(3), colour: viridis(0) }, { name: hi.toPrecision(3), colour: viridis(1) });
  }
  return shown;
}
