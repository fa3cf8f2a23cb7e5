// Trial table of one experiment, as Tune's progress table has it: the search's metric
// and mode (another can be picked), hyperparameter columns, the step in progress, live
// rows, sorting and filtering (copes with 1,000s); and one metric of every trial by
// iteration in one chart.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const kit = window.raywatch.trials;
  const initial = JSON.parse(document.getElementById("experiment-initial").textContent);
  kit.syncClock(initial.server_now);
  const table = document.getElementById("trials");
  const expId = table.dataset.experimentId;
  const metricSelect = document.getElementById("metric-select");
  const modeSelect = document.getElementById("mode-select");
  const trials = new Map();
  const MAX_HP_COLUMNS = 6;
  let objective = initial.objective;
  let chosen = { metric: objective.metric, mode: objective.mode, picked: false };
  let hpKeys = [];
  let sortKey = "trial_id", sortDir = 1;
  const stepCells = new Map();  // trial id -> the step cell of a running trial's row

  // --- values -----------------------------------------------------------------------
  function best(t) {
    const span = (t.metric_range || {})[chosen.metric];
    return span ? span[chosen.mode === "min" ? 0 : 1] : null;
  }
  const last = (t) => { const v = (t.last_metrics || {})[chosen.metric]; return v === undefined ? null : v; };
  // A running trial's current step has lasted since its last result: once that is longer
  // than its last completed step, it is the step time (a hung trial's keeps growing).
  function step(t) {
    const done = t.last_step_s;
    const running = t.status === "RUNNING" ? kit.secondsSince(t.last_result_at) : null;
    if (running !== null && (done === null || running > done)) return { value: running, running: true };
    return { value: done, running: false };
  }
  const flat = new WeakMap();  // a row object's flattened config, worked out once
  function config(t) {
    if (!flat.has(t)) flat.set(t, kit.flatten(t.config));
    return flat.get(t);
  }
  const health = (t) => (t.health_all && t.health_all.length ? t.health_all.join(", ") : "ok");

  // --- hyperparameter columns: keys that differ across trials first ----------------------
  function computeHpKeys() {
    const values = new Map();
    for (const t of trials.values()) {
      for (const [k, v] of Object.entries(config(t))) {
        if (!values.has(k)) values.set(k, new Set());
        values.get(k).add(JSON.stringify(v));
      }
    }
    const differ = [], same = [];
    for (const [k, seen] of values) {
      const everywhere = [...trials.values()].every((t) => k in config(t));
      (seen.size > 1 || !everywhere ? differ : same).push(k);
    }
    differ.sort(); same.sort();
    const keys = [...differ, ...same].slice(0, MAX_HP_COLUMNS);
    const rest = same.filter((k) => !keys.includes(k));
    const constants = document.getElementById("constants");
    const sample = trials.size ? config(trials.values().next().value) : {};
    constants.hidden = !rest.length;
    constants.textContent = rest.length
      ? "Same in every trial: " + rest.map((k) => k + "=" + kit.fmt(sample[k])).join(", ") : "";
    return keys;
  }

  // --- columns --------------------------------------------------------------------------
  function columns() {
    const metric = chosen.metric || "metric";
    const cols = [
      { key: "trial_id", head: "Trial", sort: (t) => t.trial_id, cell: (t) => {
        const td = el("td"); td.append(el("a", { href: "/trials/" + t.id + "/" }, t.trial_id)); return td; } },
      { key: "status", head: "Status", sort: (t) => t.status, cell: (t) =>
        el("td", { class: "status status-" + t.status, title: t.status_reason }, t.status) },
      { key: "iteration", head: "Iter", sort: (t) => t.iteration, cell: (t) => el("td", { class: "num" }, kit.fmt(t.iteration)) },
    ];
    for (const k of hpKeys) {
      cols.push({ key: "hp:" + k, head: k, hp: true, sort: (t) => { const v = config(t)[k]; return v === undefined ? null : v; },
        cell: (t) => el("td", { class: "hp" }, kit.fmt(config(t)[k])) });
    }
    cols.push(
      { key: "best", head: ["Best ", metric, " " + kit.arrow(chosen.mode)], sort: best,
        firstDir: chosen.mode === "min" ? 1 : -1, cell: (t) => el("td", { class: "num best" }, kit.fmt(best(t))) },
      { key: "last", head: ["Last ", metric], sort: last, cell: (t) => el("td", { class: "num last" }, kit.fmt(last(t))) },
      { key: "step", head: "Step s", sort: (t) => step(t).value, firstDir: -1, cell: stepCell },
      { key: "last_result_at", head: "Last result", sort: (t) => t.last_result_at, firstDir: -1, cell: (t) =>
        el("td", { "data-age": t.last_result_at || "", title: kit.utc(t.last_result_at) }, kit.age(t.last_result_at)) },
      { key: "node_ip", head: "Node / pid", sort: (t) => t.node_ip, cell: (t) =>
        el("td", {}, (t.node_ip || "–") + (t.pid ? " / " + t.pid : "")) },
      { key: "health", head: "Health", sort: health, cell: (t) => el("td", { class: "health" }, health(t)) },
    );
    return cols;
  }
  function stepCell(t) {
    const s = step(t);
    if (!s.running) return el("td", { class: "num step" }, kit.fmt(s.value === null ? null : +s.value.toFixed(2)));
    const td = el("td", { class: "num step step-running", "data-running-since": t.last_result_at,
      title: "step in progress for " + kit.duration(s.value) + "; last completed step " + kit.fmt(t.last_step_s) + " s" },
    Math.round(s.value));
    td.append(el("small", {}, "in progress"));
    return td;
  }
  function renderHead(cols) {
    const tr = el("tr");
    for (const c of cols) {
      const th = el("th", { "data-sort": c.key, class: c.hp ? "hp" : "" });
      if (Array.isArray(c.head)) th.append(c.head[0], el("span", { class: "metric-name" }, c.head[1]), c.head[2] || "");
      else th.textContent = c.head;
      if (c.hp) th.title = "hyperparameter (config)";
      tr.append(th);
    }
    table.tHead.replaceChildren(tr);
  }

  // --- filter, sort, render ----------------------------------------------------------------
  const hay = new WeakMap();
  function haystack(t) {
    if (!hay.has(t)) {
      const cfg = Object.entries(config(t)).map(([k, v]) => k + "=" + kit.fmt(v)).join(" ");
      hay.set(t, (t.trial_id + " " + t.status + " " + t.node_ip + " " + t.hostname + " " + health(t) + " " + cfg).toLowerCase());
    }
    return hay.get(t);
  }
  function matches(t, text, status, unhealthy) {
    if (status && t.status !== status) return false;
    if (unhealthy && t.health === "ok") return false;
    return !text || haystack(t).includes(text);
  }
  function render() {
    const cols = columns();
    renderHead(cols);
    const text = document.getElementById("filter").value.trim().toLowerCase();
    const status = document.getElementById("status-filter").value;
    const unhealthy = document.getElementById("unhealthy-only").checked;
    const shown = [...trials.values()].filter((t) => matches(t, text, status, unhealthy));
    const sorter = (cols.find((c) => c.key === sortKey) || cols[0]).sort;
    shown.sort((a, b) => {
      const x = sorter(a), y = sorter(b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sortDir;
    });
    const frag = document.createDocumentFragment();
    stepCells.clear();
    for (const t of shown) {
      const tr = el("tr", { "data-trial-id": t.trial_id, class: "health-" + t.health.replace(" ", "-") });
      for (const c of cols) {
        const td = c.cell(t);
        if (c.key === "step" && t.status === "RUNNING") stepCells.set(t.trial_id, td);
        tr.append(td);
      }
      frag.append(tr);
    }
    table.tBodies[0].replaceChildren(frag);
    document.getElementById("count").textContent = shown.length + " of " + trials.size + " trials";
  }

  // --- the metric and mode ------------------------------------------------------------------
  function metricNames() {
    const names = new Set();
    for (const t of trials.values()) for (const k of Object.keys(t.metric_range || {})) names.add(k);
    if (objective.metric) names.add(objective.metric);
    return [...names].sort((a, b) => (a === objective.metric ? -1 : b === objective.metric ? 1 : a.localeCompare(b)));
  }
  function renderObjective() {
    if (!chosen.picked) chosen = { metric: objective.metric, mode: objective.mode, picked: false };
    const names = metricNames();
    if (!chosen.metric && names.length) chosen.metric = names[0];
    const current = [...metricSelect.options].map((o) => o.value).join("\n");
    if (current !== names.join("\n")) {
      metricSelect.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    }
    metricSelect.value = chosen.metric || "";
    modeSelect.value = chosen.mode;
    const source = document.getElementById("objective-source");
    const searchOne = chosen.metric === objective.metric && chosen.mode === objective.mode;
    const fromTune = objective.metric_from === "tune" && objective.mode_from === "tune";
    source.classList.toggle("guessed", searchOne && !fromTune);
    source.textContent = !searchOne ? "picked here; the search's is " + (objective.metric || "not named") + " " + kit.arrow(objective.mode)
      : fromTune ? "the search's own metric and mode (Tune's experiment state)"
        : objective.metric_from === "tune" ? "metric from the search's state; mode guessed (its tuner.pkl is not readable here)"
          : objective.metric ? "guessed: the search's files name no metric" : "the search's files name no metric: pick one";
  }
  function pick() {
    const metric = metricSelect.value;
    const mode = metric !== chosen.metric
      ? (metric === objective.metric ? objective.mode : kit.guessMode(metric)) : modeSelect.value;
    chosen = { metric, mode, picked: true };
    if (sortKey === "best") sortDir = mode === "min" ? 1 : -1;  // best first, still
    renderObjective();
    render();
    loadCurves();
  }

  // --- one metric of every trial by iteration -------------------------------------------------
  let curvesAt = 0, curvesTimer = null;
  async function loadCurves() {
    curvesAt = Date.now();
    if (!chosen.metric || !window.Plotly) return;
    const query = new URLSearchParams({ metric: chosen.metric, mode: chosen.mode });
    const reply = await fetch("/api/experiments/" + expId + "/curves/?" + query, { credentials: "same-origin" });
    if (!reply.ok) return;
    renderCurves(await reply.json());
  }
  function soonCurves() {
    if (curvesTimer) return;
    curvesTimer = setTimeout(() => { curvesTimer = null; loadCurves(); }, Math.max(0, 5000 - (Date.now() - curvesAt)));
  }
  function renderCurves(data) {
    if (data.metric !== chosen.metric) return;
    let maxIter = 0;
    const traces = data.curves.map((c) => {
      maxIter = Math.max(maxIter, c.x[c.x.length - 1] || 0);
      const t = trials.get(c.trial_id);
      const hp = t ? hpKeys.filter((k) => k in config(t)).map((k) => kit.plotText(k + "=" + kit.fmt(config(t)[k]))) : [];
      const id = kit.plotText(c.trial_id);
      return { name: [id, ...hp.slice(0, 2)].join(" "), x: c.x, y: c.y, type: "scatter",
        mode: c.x.length > 1 ? "lines" : "markers",
        hovertemplate: "<b>" + id + "</b><br>iteration %{x}<br>" + kit.plotText(data.metric) + " %{y}<br>" + hp.join("<br>") + "<extra></extra>" };
    });
    const layout = kit.layout(data.metric, maxIter, { height: 300, showlegend: traces.length <= 12 });
    layout.legend = { orientation: "v", x: 1.02, y: 1 };
    layout.margin.r = traces.length <= 12 ? 220 : 12;
    window.Plotly.react("curves-chart", traces, layout, kit.config);
    const chart = document.getElementById("curves-chart");
    chart.dataset.curves = String(traces.length);
    document.getElementById("curves-caption").textContent = traces.length
      ? data.metric + " by iteration, one line per trial" + (data.shown < data.trials ? " (the best " + data.shown + " of " + data.trials + " by " + kit.arrow(data.mode) + ")" : "")
      : "no trial has reported " + data.metric + " yet";
  }

  // --- live -------------------------------------------------------------------------------
  function upsert(rows, replace) {
    if (replace) trials.clear();
    for (const t of rows) trials.set(t.trial_id, t);
    hpKeys = computeHpKeys();
    renderObjective();
    render();
  }
  table.tHead.addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    const key = th && th.dataset.sort;
    if (!key) return;
    const col = columns().find((c) => c.key === key);
    sortDir = key === sortKey ? -sortDir : (col && col.firstDir) || 1;
    sortKey = key;
    render();
  });
  for (const id of ["filter", "status-filter", "unhealthy-only"]) {
    document.getElementById(id).addEventListener("input", render);
  }
  metricSelect.addEventListener("change", pick);
  modeSelect.addEventListener("change", pick);
  setInterval(() => {  // ages, and steps in progress, move between pushes
    if (sortKey === "step" || sortKey === "last_result_at") { render(); return; }
    for (const cell of table.querySelectorAll("td[data-age]")) cell.textContent = kit.age(cell.dataset.age);
    for (const [id, cell] of stepCells) {
      const fresh = stepCell(trials.get(id));
      cell.replaceWith(fresh);
      stepCells.set(id, fresh);
    }
  }, 5000);
  upsert(initial.trials, true);
  loadCurves();
  window.raywatch.connect("/ws/experiments/" + expId + "/", {
    objective: (o) => { objective = o; renderObjective(); },
    trials: (rows, msg) => { upsert(rows, !!(msg && msg.snapshot)); soonCurves(); },
  });
})();
