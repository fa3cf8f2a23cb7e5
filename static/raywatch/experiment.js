// Trial table of one experiment, as Tune's progress table has it: the search's metric
// and mode (another can be picked), hyperparameter columns, the step in progress, and
// one metric of every trial by iteration in one chart. The table is a page of rows the
// server filtered, sorted and paged (/api/experiments/<id>/trials/): a 10,000-trial
// search sends the hundred rows shown. Live pushes carry only the shown rows (the
// socket is told which); a change elsewhere fetches the page again, at most every few
// seconds.
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
  const filterBox = document.getElementById("filter");
  const statusBox = document.getElementById("status-filter");
  const unhealthyBox = document.getElementById("unhealthy-only");
  const sizeBox = document.getElementById("page-size");
  const REFRESH_MS = 4000;  // a change off the page fetches it again at most this often
  let data = initial;  // the last page the server gave
  const shownRows = new Map();  // trial id -> its row object, for the page shown
  let objective = initial.objective;
  let chosen = { metric: initial.metric, mode: initial.mode, picked: false };
  let sortKey = initial.query.sort, sortDir = initial.query.descending ? -1 : 1;
  let page = initial.query.page;
  let socket = null;
  const stepCells = new Map();  // trial id -> the step cell of a running trial's row
  statusBox.value = initial.query.status || "";
  filterBox.value = initial.query.text || "";
  unhealthyBox.checked = !!initial.query.unhealthy;
  sizeBox.value = String(initial.page_size);

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

  // --- columns --------------------------------------------------------------------------
  function columns() {
    const metric = chosen.metric || "metric";
    const cols = [
      { key: "trial_id", head: "Trial", cell: (t) => {
        const td = el("td"); td.append(el("a", { href: "/trials/" + t.id + "/" }, t.trial_id)); return td; } },
      { key: "status", head: "Status", cell: (t) =>
        el("td", { class: "status status-" + t.status, title: t.status_reason },
           t.terminated_by ? t.status + " · terminated by " + t.terminated_by : t.status) },
      { key: "iteration", head: "Iter", cell: (t) => el("td", { class: "num" }, kit.fmt(t.iteration)) },
    ];
    for (const k of data.hp_keys) {
      cols.push({ key: "hp:" + k, head: k, hp: true, cell: (t) => el("td", { class: "hp" }, kit.fmt(config(t)[k])) });
    }
    cols.push(
      { key: "best", head: ["Best ", metric, " " + kit.arrow(chosen.mode)],
        firstDir: chosen.mode === "min" ? 1 : -1, cell: (t) => el("td", { class: "num best" }, kit.fmt(best(t))) },
      { key: "last", head: ["Last ", metric], cell: (t) => el("td", { class: "num last" }, kit.fmt(last(t))) },
      { key: "step", head: "Step s", firstDir: -1, cell: stepCell },
      { key: "last_result_at", head: "Last result", firstDir: -1, cell: (t) =>
        el("td", { "data-age": t.last_result_at || "", title: kit.utc(t.last_result_at) }, kit.age(t.last_result_at)) },
      { key: "node_ip", head: "Node / pid", cell: (t) =>
        el("td", { class: "node" }, (t.node_ip || "–") + (t.pid ? " / " + t.pid : "")) },
      { key: "health", head: "Health", cell: (t) => el("td", { class: "health" }, health(t)) },
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
      if (c.key === sortKey) th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
      tr.append(th);
    }
    table.tHead.replaceChildren(tr);
  }
  function rowOf(t, cols) {
    const tr = el("tr", { "data-trial-id": t.trial_id, class: "health-" + t.health.replace(" ", "-") });
    for (const c of cols) {
      const td = c.cell(t);
      if (c.key === "step" && t.status === "RUNNING") stepCells.set(t.trial_id, td);
      tr.append(td);
    }
    return tr;
  }

  // --- the page: rows the server chose ---------------------------------------------------------
  function render() {
    const cols = columns();
    renderHead(cols);
    const frag = document.createDocumentFragment();
    stepCells.clear();
    shownRows.clear();
    for (const t of data.trials) {
      shownRows.set(t.trial_id, t);
      frag.append(rowOf(t, cols));
    }
    table.tBodies[0].replaceChildren(frag);
    const constants = document.getElementById("constants");
    const rest = Object.entries(data.constants || {});
    constants.hidden = !rest.length;
    constants.textContent = rest.length
      ? "Same in every trial: " + rest.map(([k, v]) => k + "=" + kit.fmt(v)).join(", ") : "";
    renderCount();
    watch();
  }
  function renderCount() {
    const n = (v) => Number(v).toLocaleString("en-US");
    const from = data.matched ? (data.page - 1) * data.page_size + 1 : 0;
    const to = from ? from + data.trials.length - 1 : 0;
    const filtered = data.matched !== data.total;
    document.getElementById("count").textContent = (from ? n(from) + "–" + n(to) : "none")
      + " of " + n(data.matched) + (filtered ? " matching (" + n(data.total) + " trials)" : " trials");
    for (const id of ["page-prev", "page-of", "page-next"]) document.getElementById(id).hidden = data.pages <= 1;
    document.getElementById("page-of").textContent = "page " + n(data.page) + " of " + n(data.pages);
    document.getElementById("page-prev").disabled = data.page <= 1;
    document.getElementById("page-next").disabled = data.page >= data.pages;
  }
  // Tell the socket which trials are shown: it forwards their rows only.
  function watch() {
    const s = socket && socket.socket;
    if (s && s.readyState === WebSocket.OPEN) {
      s.send(JSON.stringify({ type: "watch", ids: data.trials.map((t) => t.id) }));
    }
  }

  function query() {
    const q = new URLSearchParams();
    const text = filterBox.value.trim();
    if (text) q.set("q", text);
    if (statusBox.value) q.set("status", statusBox.value);
    if (unhealthyBox.checked) q.set("unhealthy", "1");
    if (sortKey !== "trial_id") q.set("sort", sortKey);
    if (sortDir < 0) q.set("dir", "desc");
    if (chosen.picked) { q.set("metric", chosen.metric || ""); q.set("mode", chosen.mode); }
    if (page > 1) q.set("page", String(page));
    if (sizeBox.value !== "100") q.set("page_size", sizeBox.value);
    return q;
  }
  let asked = 0, fetchedAt = 0, refreshTimer = null;
  async function fetchPage() {
    const q = query();
    const mine = ++asked;
    fetchedAt = Date.now();
    table.setAttribute("aria-busy", "true");
    let reply;
    try {
      reply = await fetch("/api/experiments/" + expId + "/trials/?" + q, { credentials: "same-origin" });
    } catch (e) {
      reply = null;
    }
    if (mine !== asked) return;  // a newer question is on its way
    table.removeAttribute("aria-busy");
    const problem = document.getElementById("table-problem");
    if (!reply || !reply.ok) {
      let why = reply ? "the server answered " + reply.status : "the server did not answer";
      if (reply && reply.status === 400) {
        try { why = Object.entries(await reply.json()).map(([k, v]) => k + ": " + v).join("; "); } catch (e) { /* keep */ }
      }
      problem.hidden = false;
      problem.textContent = "Could not load the trials: " + why;
      return;
    }
    problem.hidden = true;
    data = await reply.json();
    kit.syncClock(data.server_now);
    objective = data.objective;
    page = data.page;
    const url = new URL(location.href);
    url.search = q.toString();
    history.replaceState(null, "", url);
    renderObjective();
    render();
  }
  // A change the page cannot place (another trial's row, a new trial): fetch the page
  // again, at most every REFRESH_MS.
  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; fetchPage(); },
      Math.max(0, REFRESH_MS - (Date.now() - fetchedAt)));
  }
  let typing = null;
  function requery(delay) {
    page = 1;
    clearTimeout(typing);
    typing = setTimeout(fetchPage, delay || 0);
  }

  // --- the metric and mode ------------------------------------------------------------------
  function renderObjective() {
    if (!chosen.picked) chosen = { metric: data.metric, mode: data.mode, picked: false };
    const names = data.metrics.slice();
    if (chosen.metric && !names.includes(chosen.metric)) names.push(chosen.metric);
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
    requery();
    loadCurves();
  }

  // --- one metric of every trial by iteration -------------------------------------------------
  // Plotly (4.8 MB of script, most of a second to parse here) is read after the table is
  // on screen: the rows an operator came for do not wait for the chart.
  let plotlyReady = null;
  function plotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotlyReady) {
      plotlyReady = new Promise((resolve, reject) => {
        const script = el("script", { src: document.getElementById("curves-chart").dataset.plotly });
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => { plotlyReady = null; reject(new Error("Plotly did not load")); };
        document.head.append(script);
      });
    }
    return plotlyReady;
  }
  let curvesAt = 0, curvesTimer = null;
  async function loadCurves() {
    curvesAt = Date.now();
    if (!chosen.metric) return;
    const q = new URLSearchParams({ metric: chosen.metric, mode: chosen.mode });
    const [reply] = await Promise.all([
      fetch("/api/experiments/" + expId + "/curves/?" + q, { credentials: "same-origin" }),
      plotly().catch(() => null)]);
    if (!reply.ok || !window.Plotly) return;
    renderCurves(await reply.json());
  }
  function soonCurves() {
    if (curvesTimer) return;
    curvesTimer = setTimeout(() => { curvesTimer = null; loadCurves(); }, Math.max(0, 5000 - (Date.now() - curvesAt)));
  }
  function renderCurves(curves) {
    if (curves.metric !== chosen.metric) return;
    let maxIter = 0;
    const traces = curves.curves.map((c) => {
      maxIter = Math.max(maxIter, c.x[c.x.length - 1] || 0);
      const t = shownRows.get(c.trial_id);
      const hp = t ? data.hp_keys.filter((k) => k in config(t)).map((k) => kit.plotText(k + "=" + kit.fmt(config(t)[k]))) : [];
      const id = kit.plotText(c.trial_id);
      return { name: [id, ...hp.slice(0, 2)].join(" "), x: c.x, y: c.y, type: "scatter",
        mode: c.x.length > 1 ? "lines" : "markers",
        hovertemplate: "<b>" + id + "</b><br>iteration %{x}<br>" + kit.plotText(curves.metric) + " %{y}<br>" + hp.join("<br>") + "<extra></extra>" };
    });
    const layout = kit.layout(curves.metric, maxIter, { height: 300, showlegend: traces.length <= 12 });
    layout.legend = { orientation: "v", x: 1.02, y: 1 };
    layout.margin.r = traces.length <= 12 ? 220 : 12;
    window.Plotly.react("curves-chart", traces, layout, kit.config);
    const chart = document.getElementById("curves-chart");
    chart.dataset.curves = String(traces.length);
    document.getElementById("curves-caption").textContent = traces.length
      ? curves.metric + " by iteration, one line per trial" + (curves.shown < curves.trials ? " (the best " + curves.shown + " of " + curves.trials + " by " + kit.arrow(curves.mode) + ")" : "")
      : "no trial has reported " + curves.metric + " yet";
  }

  // --- live -------------------------------------------------------------------------------
  // Rows of shown trials replace theirs in place; anything else fetches the page again.
  const LIVE_SORTS = new Set(["status", "iteration", "best", "last", "step", "last_result_at", "health"]);
  function apply(rows, msg) {
    const cols = columns();
    let moved = false;
    for (const t of rows) {
      const old = shownRows.get(t.trial_id);
      if (!old) { moved = true; continue; }
      const i = data.trials.indexOf(old);
      data.trials[i] = t;
      shownRows.set(t.trial_id, t);
      const tr = table.querySelector('tbody tr[data-trial-id="' + CSS.escape(t.trial_id) + '"]');
      if (tr) tr.replaceWith(rowOf(t, cols));
      if (old.status !== t.status || old.health !== t.health) moved = true;
    }
    const filtered = filterBox.value.trim() || statusBox.value || unhealthyBox.checked;
    if (moved || (msg && msg.others) || (rows.length && (LIVE_SORTS.has(sortKey) || filtered))) refreshSoon();
  }
  table.tHead.addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    const key = th && th.dataset.sort;
    if (!key) return;
    const col = columns().find((c) => c.key === key);
    sortDir = key === sortKey ? -sortDir : (col && col.firstDir) || 1;
    sortKey = key;
    renderHead(columns());
    requery();
  });
  filterBox.addEventListener("input", () => requery(250));
  for (const box of [statusBox, unhealthyBox, sizeBox]) box.addEventListener("input", () => requery());
  document.getElementById("page-prev").addEventListener("click", () => { page = Math.max(1, page - 1); fetchPage(); });
  document.getElementById("page-next").addEventListener("click", () => { page += 1; fetchPage(); });
  metricSelect.addEventListener("change", pick);
  modeSelect.addEventListener("change", pick);
  setInterval(() => {  // ages, and steps in progress, move between pushes
    if (sortKey === "step" || sortKey === "last_result_at") refreshSoon();
    for (const cell of table.querySelectorAll("td[data-age]")) cell.textContent = kit.age(cell.dataset.age);
    for (const [id, cell] of stepCells) {
      const fresh = stepCell(shownRows.get(id));
      cell.replaceWith(fresh);
      stepCells.set(id, fresh);
    }
  }, 5000);
  renderObjective();
  render();
  requestAnimationFrame(() => setTimeout(loadCurves, 0));  // once the rows are painted
  socket = window.raywatch.connect("/ws/experiments/" + expId + "/", {
    objective: (o) => { objective = o; renderObjective(); },
    // On (re)connect the page's rows are fetched again: nothing missed while away.
    trials: (rows, msg) => {
      if (msg && msg.snapshot) { watch(); if (Date.now() - fetchedAt > 1000) fetchPage(); return; }
      apply(rows, msg);
      soonCurves();
    },
  });
})();
