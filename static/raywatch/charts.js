// The one look of raywatch's Plotly charts: the dark panel of raywatch.css behind the
// plot, subdued gridlines, axis titles with their units, integer ticks on count axes
// (iterations), the theme's colours. Every chart draws through raywatch.charts:
//
//   raywatch.charts.draw(div, traces, {
//     x: { title: "iteration", integer: true },
//     y: { title: "reward", unit: "s", range: [0, 100] },   // other keys go to Plotly
//     height: 220, barmode: "stack",                          // so do these
//   });
//
// layout(opts, traces) gives the layout alone (for Plotly.relayout and friends).
(function () {
  "use strict";
  const THEME = {
    panel: "#182029", fg: "#e6e9ee", muted: "#8a96a3", grid: "#26313d", line: "#34414f",
    colorway: ["#4c9aff", "#2fbf71", "#e0a526", "#c86bfa", "#e5484d", "#36c5d8", "#ff7a33", "#a3b1bf"],
  };
  const CONFIG = { displaylogo: false, responsive: true };
  const MAX_INTEGER_TICKS = 12;

  // Plotly reads a few HTML tags in titles; a title may be a metric name from a user's file.
  const plain = (v) => String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  function titleOf(spec) {
    const text = spec.unit ? (spec.title ? spec.title + " (" + spec.unit + ")" : spec.unit) : spec.title;
    return text ? { text: plain(text), font: { color: THEME.muted, size: 12 } } : undefined;
  }

  // Ticks on whole numbers only: a tick every 1, 2, 5, 10… steps, never 0.5.
  function integerTicks(values) {
    const nums = values.filter((v) => typeof v === "number" && isFinite(v));
    const span = nums.length ? Math.max(...nums) - Math.min(...nums) : 0;
    return { tickformat: "d", nticks: Math.max(2, Math.min(MAX_INTEGER_TICKS, Math.floor(span) + 1)) };
  }

  function axis(spec, values) {
    const { title, unit, integer, ...plotly } = spec || {};
    return {
      gridcolor: THEME.grid, zerolinecolor: THEME.line, linecolor: THEME.line, tickcolor: THEME.line,
      automargin: true, title: titleOf({ title, unit }),
      ...(integer ? integerTicks(values) : {}),
      ...plotly,
    };
  }

  function layout(opts, traces) {
    const { x, y, ...rest } = opts || {};
    const all = (key) => [].concat(...(traces || []).map((t) => t[key] || []));
    return {
      paper_bgcolor: THEME.panel, plot_bgcolor: THEME.panel, colorway: THEME.colorway,
      font: { color: THEME.fg, family: "system-ui, sans-serif", size: 12 },
      margin: { t: 24, r: 12, b: 36, l: 48 },
      legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom", font: { color: THEME.muted } },
      hoverlabel: { bgcolor: THEME.grid, bordercolor: THEME.line, font: { color: THEME.fg } },
      xaxis: axis(x, all("x")),
      yaxis: axis(y, all("y")),
      ...rest,
    };
  }

  function draw(div, traces, opts, config) {
    return window.Plotly.react(div, traces, layout(opts, traces), { ...CONFIG, ...(config || {}) });
  }

  window.raywatch = window.raywatch || {};
  window.raywatch.charts = { THEME, CONFIG, layout, draw };
})();
