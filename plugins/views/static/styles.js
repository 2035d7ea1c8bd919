// The view's CSS rules, added once to the page (a module, so a standalone page needs no file).

const CSS = `
.ls-root { font: 13px/1.4 Roboto, Arial, sans-serif; color: #212121; padding: 12px 16px; }
.ls-root h2 { font-size: 15px; margin: 18px 0 6px; font-weight: 500; }
.ls-root .ls-bar { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 4px 0; }
.ls-root .ls-msg { background: #fff8e1; border-left: 3px solid #f9a825; padding: 4px 8px; margin: 3px 0; }
.ls-root .ls-row { display: flex; gap: 16px; align-items: flex-start; flex-wrap: wrap; }
.ls-root canvas { border: 1px solid #e0e0e0; background: #fff; }
.ls-root .ls-side { min-width: 220px; max-width: 320px; }
.ls-root .ls-legend span { display: inline-flex; align-items: center; margin: 0 8px 2px 0; }
.ls-root .ls-swatch { width: 10px; height: 10px; display: inline-block; margin-right: 4px; }
.ls-root .ls-tip { position: fixed; pointer-events: none; background: rgba(33,33,33,.92);
  color: #fff; padding: 4px 7px; border-radius: 3px; font-size: 12px; display: none; z-index: 9; }
.ls-root table { border-collapse: collapse; }
.ls-root td, .ls-root th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }
.ls-root tr.ls-click { cursor: pointer; }
.ls-root tr.ls-click:hover { background: #f5f5f5; }
.ls-root tr.ls-current { background: #fff3e0; }
.ls-root tr.ls-resolved { color: #9e9e9e; }
.ls-root td.ls-nowrap { white-space: nowrap; }
.ls-root tr.ls-resolved.ls-current { background: #f5f5f5; }
.ls-root tr.ls-apart td { color: #757575; font-size: 12px; padding-top: 8px; }
.ls-root .ls-help { cursor: help; text-decoration: underline dotted #9e9e9e; }
.ls-root .ls-series { font-size: 12px; line-height: 1.7; min-width: 110px; }
.ls-root .ls-movers { max-height: 260px; overflow: auto; }
.ls-root button { cursor: pointer; }
.ls-root .ls-hint { color: #616161; font-size: 12px; margin: 0 0 4px; }
.ls-root .ls-chart { display: flex; align-items: flex-start; gap: 2px; }
.ls-root .ls-axis-y { writing-mode: vertical-rl; transform: rotate(180deg); text-align: center;
  font-size: 11px; color: #616161; }
.ls-root .ls-axis-x { text-align: center; font-size: 11px; color: #616161; }
.ls-root canvas.ls-pick { cursor: pointer; }
.ls-root .ls-hist { display: flex; align-items: flex-end; gap: 3px; margin: 4px 0 8px; }
.ls-root .ls-hbar { display: flex; flex-direction: column; align-items: center; width: 18px; }
.ls-root .ls-hbar > div:nth-child(2) { width: 14px; }
.ls-root .ls-hcount, .ls-root .ls-hlabel { font-size: 10px; color: #616161; }
.ls-root .ls-runs { margin: 4px 0 8px; }
.ls-root .ls-table-holder { max-height: 360px; overflow: auto; border: 1px solid #eee; }
.ls-root tr.ls-run-row { cursor: pointer; }
.ls-root tr.ls-run-row:hover { background: #f5f5f5; }
.ls-root tr.ls-run-shown { background: #fff3e0; }
.ls-root .ls-table-holder th { position: sticky; top: 0; background: #fafafa; cursor: pointer;
  white-space: nowrap; }
.ls-root section[data-role="compare"] { border-top: 1px solid #e0e0e0; margin-top: 8px; }
`;

/** A <style> element with the view's rules (they apply inside an element of class ls-root). */
export function styleElement() {
  const style = document.createElement('style');
  style.textContent = CSS;
  return style;
}
