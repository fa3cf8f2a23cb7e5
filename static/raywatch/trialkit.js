// Shared by the experiments, experiment and trial pages: times (UTC with a relative
// age, against the server's clock), numbers, config flattening and chart layouts.
(function () {
  "use strict";
  let skewMs = 0; // server clock minus browser clock

  function syncClock(serverIso) {
    const server = Date.parse(serverIso || "");
    if (!Number.isNaN(server)) skewMs = server - Date.now();
  }
  const now = () => Date.now() + skewMs;
  function secondsSince(iso) {
    const at = Date.parse(iso || "");
    return Number.isNaN(at) ? null : Math.max(0, (now() - at) / 1000);
  }
  // Lengths and moments as every page shows them (time.js), ages on the server's clock.
  const duration = (s) => (s === null || s === undefined ? "–" : window.raywatch.time.age(s));
  const age = (iso) => { const s = secondsSince(iso); return s === null ? "–" : duration(s) + " ago"; };
  const utc = (iso) => window.raywatch.time.abs(iso) || "–";
  // "2026-11-23 15:43:51 UTC · 3 min ago" (or the viewer's zone: RAYWATCH_TIME_DISPLAY)
  const when = (iso) => (iso ? utc(iso) + " · " + age(iso) : "–");

  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : (+v.toPrecision(5)).toString();
    return typeof v === "object" ? JSON.stringify(v) : String(v);
  }
  // {"model": {"lr": 0.1}} -> {"model/lr": 0.1}, as Tune's progress table names them
  function flatten(obj, prefix, out) {
    out = out || {};
    for (const [k, v] of Object.entries(obj || {})) {
      const name = (prefix || "") + k;
      if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, name + "/", out);
      else out[name] = v;
    }
    return out;
  }
  const LOWER_IS_BETTER = /loss|error|(^|[_/])err($|[_/])|perplexity|regret|time|latency/i;
  const guessMode = (metric) => (LOWER_IS_BETTER.test(metric || "") ? "min" : "max");
  const arrow = (mode) => (mode === "min" ? "↓ min" : "↑ max");

  // Plotly reads a few HTML tags in names and titles: these come from users' files.
  const plotText = (v) => String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

  // Charts: raywatch's one look (charts.js), whole-number iteration ticks.
  function layout(ytitle, maxIteration, extra) {
    const iteration = { title: "iteration", tickformat: "d", ...((maxIteration || 0) <= 12 ? { dtick: 1 } : {}) };
    return Object.assign(window.raywatch.charts.layout({
      height: 240, margin: { t: 10, r: 12, b: 44, l: 60 }, hovermode: "closest",
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" }, x: iteration, y: { title: ytitle },
    }), extra || {});
  }
  const config = window.raywatch.charts.CONFIG;

  window.raywatch.trials = { syncClock, secondsSince, duration, age, utc, when, fmt, flatten,
    guessMode, arrow, layout, config, plotText };
})();
