// One trial: metric curves (pick the metrics), stacked per-phase step timing,
// step-time history and config. New results arrive over the socket.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const initial = JSON.parse(document.getElementById("trial-initial").textContent);
  const timingPatterns = initial.timing_keys.map((p) =>
    new RegExp("^" + p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$"));
  const results = new Map(); // "attempt:iteration" -> result
  const chosen = new Set();
  let trial = initial.trial;

  const isTiming = (k) => timingPatterns.some((re) => re.test(k));
  const key = (r) => r.attempt + ":" + r.iteration;
  const sorted = () => [...results.values()].sort((a, b) => a.attempt - b.attempt || a.iteration - b.iteration);
  const layout = (ytitle) => ({
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { color: "#e6e9ee" },
    height: 260, margin: { t: 10, r: 10, b: 40, l: 50 }, legend: { orientation: "h" },
    xaxis: { title: "iteration" }, yaxis: { title: ytitle },
  });
  const cfg = { displaylogo: false, responsive: true };

  function metricNames() {
    const names = new Set();
    for (const r of results.values()) for (const k of Object.keys(r.metrics)) if (!isTiming(k)) names.add(k);
    return [...names].sort();
  }
  function renderPicker() {
    const picker = document.getElementById("metric-picker");
    const names = metricNames();
    if (!chosen.size) {
      for (const n of names) {
        if (!/^time_|^time_since|iterations_since/.test(n)) { chosen.add(n); if (chosen.size >= 3) break; }
      }
    }
    picker.replaceChildren();
    for (const n of names) {
      const box = el("input", { type: "checkbox", value: n, "data-metric": n });
      box.checked = chosen.has(n);
      box.addEventListener("change", () => { box.checked ? chosen.add(n) : chosen.delete(n); renderCharts(); });
      const label = el("label", { class: "pick" });
      label.append(box, " " + n);
      picker.append(label);
    }
  }
  function series(rows, pick) {
    const byAttempt = new Map();
    for (const r of rows) {
      const v = pick(r);
      if (v === null || v === undefined) continue;
      if (!byAttempt.has(r.attempt)) byAttempt.set(r.attempt, { x: [], y: [] });
      byAttempt.get(r.attempt).x.push(r.iteration);
      byAttempt.get(r.attempt).y.push(v);
    }
    return byAttempt;
  }
  function renderCharts() {
    if (!window.Plotly) return;
    const rows = sorted();
    const traces = [];
    for (const name of chosen) {
      for (const [attempt, s] of series(rows, (r) => r.metrics[name])) {
        traces.push({ name: name + (attempt > 1 ? " (attempt " + attempt + ")" : ""), x: s.x, y: s.y, mode: "lines+markers", type: "scatter" });
      }
    }
    window.Plotly.react("metrics-chart", traces, layout("value"), cfg);
    const current = rows.filter((r) => r.attempt === trial.attempt);
    const phases = new Set();
    for (const r of current) for (const k of Object.keys(r.metrics)) if (isTiming(k)) phases.add(k);
    const phaseTraces = [...phases].sort().map((p) => ({
      name: p, type: "bar", x: current.map((r) => r.iteration), y: current.map((r) => r.metrics[p] ?? null),
    }));
    const pl = layout("seconds"); pl.barmode = "stack";
    window.Plotly.react("phases-chart", phaseTraces, pl, cfg);
    window.Plotly.react("steptime-chart", [{
      name: "time_this_iter_s", mode: "lines+markers", type: "scatter",
      x: current.map((r) => r.iteration), y: current.map((r) => r.time_this_iter_s),
    }], layout("seconds"), cfg);
    document.getElementById("metrics-chart").dataset.points = String(rows.length);
  }
  function renderFacts() {
    const set = (k, v) => { document.querySelector('[data-fact="' + k + '"]').textContent = v; };
    set("status", trial.status); set("health", trial.health);
    set("iteration", trial.iteration ?? "–"); set("attempt", trial.attempt);
    set("last_result_at", trial.last_result_at ? new Date(trial.last_result_at).toLocaleString() : "–");
    set("where", (trial.node_ip || "–") + (trial.pid ? " / pid " + trial.pid : ""));
    const err = document.getElementById("trial-error");
    err.hidden = !trial.error_text; err.textContent = trial.error_text || "";
    const perr = document.getElementById("parse-error");
    perr.hidden = !trial.parse_errors;
    perr.textContent = trial.parse_errors ? trial.parse_errors + " unreadable log line(s); last: " + trial.last_parse_error : "";
  }
  function renderConfig(config) {
    const body = document.querySelector("#config tbody");
    body.replaceChildren();
    for (const [k, v] of Object.entries(config || {})) {
      const tr = el("tr"); tr.append(el("th", {}, k), el("td", {}, typeof v === "object" ? JSON.stringify(v) : v));
      body.append(tr);
    }
  }
  function addResults(rows, replace) {
    if (replace) results.clear();
    for (const r of rows) {
      const old = results.get(key(r));
      results.set(key(r), old ? { ...old, ...r, metrics: { ...old.metrics, ...r.metrics } } : r);
    }
    renderPicker();
    renderCharts();
  }
  renderFacts();
  addResults(initial.results, true);
  renderConfig(initial.trial.config);
  window.raywatch.connect("/ws/trials/" + trial.id + "/", {
    trial: (t) => { trial = t; renderFacts(); },
    results: (rows) => addResults(rows, true),
    points: (rows) => addResults(rows, false),
  });
})();
