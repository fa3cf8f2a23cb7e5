// One trial, to decide from: its facts (silent for how long), its incidents, the tail of
// its output (Ray's log API), its stack, one chart per metric, the stacked per-phase step
// time and its config. New results and incidents arrive over the socket.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const kit = window.raywatch.trials;
  const initial = JSON.parse(document.getElementById("trial-initial").textContent);
  kit.syncClock(initial.server_now);
  const timingPatterns = initial.timing_keys.map((p) =>
    new RegExp("^" + p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$"));
  const results = new Map(); // "attempt:iteration" -> result
  const chosen = new Set();
  const objective = initial.objective;
  let trial = initial.trial;

  const isTiming = (k) => timingPatterns.some((re) => re.test(k));
  // Timings that are not a share of the step (its whole time, statistics over workers):
  // charted, not stacked; the server says which, as the step-time detector reads them.
  const notAPhase = new RegExp(initial.not_a_phase);  // trial_rules.NOT_A_PHASE
  const isPhase = (k) => isTiming(k) && !notAPhase.test(k);
  const LAST_STEPS = 5;
  const key = (r) => r.attempt + ":" + r.iteration;
  const sorted = () => [...results.values()].sort((a, b) => a.attempt - b.attempt || a.iteration - b.iteration);

  // --- facts ----------------------------------------------------------------------------
  function set(name, text) { document.querySelector('[data-fact="' + name + '"]').textContent = text; }
  function renderFacts() {
    set("status", trial.status + (trial.terminated_by ? " · terminated by " + trial.terminated_by : ""));
    set("framework", trial.framework ? "· " + trial.framework : "");
    set("health", trial.health_all && trial.health_all.length ? trial.health_all.join(", ") : "ok");
    set("iteration", trial.iteration ?? "–");
    set("attempt", trial.attempt);
    document.getElementById("best-title").textContent =
      "Best " + (objective.metric || "") + " " + (objective.metric ? kit.arrow(objective.mode) : "");
    set("best", kit.fmt(trial.best_value));
    set("where", (trial.node_ip || "–") + (trial.pid ? " / pid " + trial.pid : ""));
    renderLastResult();
    const err = document.getElementById("trial-error");
    err.hidden = !trial.error_text; err.textContent = trial.error_text || "";
    const perr = document.getElementById("parse-error");
    perr.hidden = !trial.parse_errors;
    perr.textContent = trial.parse_errors ? trial.parse_errors + " unreadable log line(s) or file(s); last: " + trial.last_parse_error : "";
  }
  function renderLastResult() {
    const cell = document.querySelector('[data-fact="last_result_at"]');
    cell.replaceChildren(trial.last_result_at ? kit.utc(trial.last_result_at) : "–");
    if (trial.last_result_at) cell.append(el("small", {}, kit.age(trial.last_result_at)));
    const silence = trial.status === "RUNNING" ? kit.secondsSince(trial.last_result_at) : null;
    const quiet = Math.max(initial.silent_after_s, 3 * (trial.last_step_s || 0));
    const silent = document.querySelector('[data-fact="silent"]');
    silent.hidden = silence === null || silence < quiet;
    silent.textContent = silent.hidden ? "" : "silent for " + kit.duration(silence);
  }

  // --- incidents ----------------------------------------------------------------------------
  function renderIncidents(incidents) {
    const body = document.querySelector("#incidents tbody");
    body.replaceChildren();
    document.getElementById("no-incidents").hidden = incidents.length > 0;
    document.getElementById("incidents").hidden = incidents.length === 0;
    for (const i of incidents) {
      const tr = el("tr", { class: "state-" + i.state, "data-incident": i.id });
      const kind = el("td"); kind.append(el("a", { href: i.url }, i.kind));
      const summary = el("td", { class: "summary" }); summary.append(el("a", { href: i.url }, i.summary));
      tr.append(el("td", { class: "state" }, i.state + (i.acknowledged_at && i.state === "firing" ? " (acknowledged)" : "")),
        kind, el("td", { class: "sev-" + i.severity }, i.severity), summary,
        el("td", { title: kit.utc(i.opened_at) }, kit.when(i.opened_at)),
        el("td", { title: kit.utc(i.resolved_at) }, i.resolved_at ? kit.when(i.resolved_at) : "–"));
      body.append(tr);
    }
  }

  // --- recent output (Ray's log API) ----------------------------------------------------------
  let outputBusy = false;
  async function loadOutput() {
    if (outputBusy) return;
    outputBusy = true;
    const reason = document.getElementById("output-reason");
    try {
      const reply = await fetch("/api/trials/" + trial.id + "/output?lines=100",
        { credentials: "same-origin" });
      const body = await reply.json().catch(() => ({}));
      if (!reply.ok) {
        body.reason = "raywatch answered " + reply.status + ": " + (body.detail || reply.statusText);
      }
      for (const [id, text] of [["output-stdout", body.stdout], ["output-stderr", body.stderr]]) {
        const pre = document.getElementById(id);
        pre.textContent = text === null || text === undefined ? "(not available)" : (text.trim() ? text : "(empty)");
        pre.scrollTop = pre.scrollHeight;
      }
      reason.hidden = !body.reason;
      reason.textContent = body.reason ? "Not available: " + body.reason : "";
      document.getElementById("output-source").textContent = body.source || "its Ray worker's stdout and stderr";
      renderActor(body);
    } finally {
      outputBusy = false;
    }
  }
  function renderActor(body) {
    const cell = document.querySelector('[data-fact="actor"]');
    if (!body.actor_id) { cell.textContent = body.reason ? "not found" : "–"; return; }
    const text = body.actor_id.slice(0, 12) + "…";
    cell.replaceChildren(body.actor_url
      ? el("a", { href: body.actor_url, target: "_blank", rel: "noopener", id: "actor-link", title: body.actor_id }, text)
      : text);
  }

  // --- charts ------------------------------------------------------------------------------
  function metricNames() {
    const names = new Set();
    for (const r of results.values()) for (const k of Object.keys(r.metrics)) if (!isTiming(k)) names.add(k);
    return [...names].sort();
  }
  function renderPicker() {
    const picker = document.getElementById("metric-picker");
    const names = metricNames();
    if (!chosen.size) {
      if (objective.metric && names.includes(objective.metric)) chosen.add(objective.metric);
      for (const n of names) {
        if (chosen.size >= 3) break;
        if (!/^time_|^time_since|iterations_since/.test(n)) chosen.add(n);
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
  // One panel per metric: a loss of 2 does not flatten a KL of 0.01.
  function renderMetricCharts(rows, maxIter) {
    const box = document.getElementById("metric-charts");
    const names = [...chosen].sort();
    const ids = names.map((n, i) => "metric-chart-" + i);
    if ([...box.children].map((f) => f.dataset.metric).join("\n") !== names.join("\n")) {
      box.replaceChildren(...names.map((n, i) => {
        const fig = el("figure", { "data-metric": n });
        fig.append(el("figcaption", {}, n + (n === objective.metric ? " (the search's metric, " + kit.arrow(objective.mode) + ")" : "")),
          el("div", { id: ids[i], class: "chart" }));
        return fig;
      }));
    }
    names.forEach((name, i) => {
      const traces = [...series(rows, (r) => r.metrics[name])].map(([attempt, s]) => ({
        name: "attempt " + attempt, x: s.x, y: s.y, type: "scatter", mode: "lines+markers",
        marker: { size: 4 }, showlegend: attempt > 1,
      }));
      const layout = kit.layout(name, maxIter, { height: 220 });
      if (traces.length > 1) layout.margin.t = 30;  // room for the attempts' legend
      window.Plotly.react(ids[i], traces, layout, kit.config);
    });
    box.dataset.points = String(rows.length);
  }
  // Stacked phases; the step's time outside every phase only when it is a real share.
  function renderPhases(current, maxIter) {
    const phases = new Set();
    for (const r of current) for (const k of Object.keys(r.metrics)) if (isPhase(k)) phases.add(k);
    const x = current.map((r) => r.iteration);
    const traces = [...phases].sort().map((p) => ({ name: kit.plotText(p), type: "bar", x, y: current.map((r) => r.metrics[p] ?? null) }));
    const other = current.map((r) => {
      const inPhases = [...phases].reduce((sum, p) => sum + (r.metrics[p] || 0), 0);
      return r.time_this_iter_s === null ? null : r.time_this_iter_s - inPhases;
    });
    const worth = other.some((v, i) => v !== null && v > 0.05 && v > 0.1 * current[i].time_this_iter_s);
    if (!phases.size) traces.push({ name: "step (time_this_iter_s)", type: "bar", x, y: current.map((r) => r.time_this_iter_s) });
    else if (worth) traces.push({ name: "outside the phases", type: "bar", x, y: other.map((v) => (v === null ? null : Math.max(0, v))) });
    const layout = kit.layout("step time (s)", maxIter, { barmode: "stack", height: 260 });
    layout.legend = { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" };
    layout.margin.t = 30;
    window.Plotly.react("phases-chart", traces, layout, kit.config);
  }
  // The last few steps' timings as numbers: a phase that just grew is read, not guessed
  // from bar heights.
  function renderLastPhases(current) {
    const table = document.getElementById("last-phases");
    const last = current.slice(-LAST_STEPS);
    const names = new Set();
    for (const r of last) for (const k of Object.keys(r.metrics)) if (isTiming(k)) names.add(k);
    table.hidden = names.size === 0;
    const head = el("tr");
    head.append(el("th", {}, "phase (s)"), ...last.map((r) => el("th", {}, "step " + r.iteration)));
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...[...names].sort().map((name) => {
      const tr = el("tr", { "data-phase": name });
      tr.append(el("th", {}, name), ...last.map((r) => el("td", {}, kit.fmt(r.metrics[name] ?? null))));
      return tr;
    }));
  }
  function renderCharts() {
    const rows = sorted();
    renderLastPhases(rows.filter((r) => r.attempt === trial.attempt));
    if (!window.Plotly) return;
    const maxIter = rows.reduce((m, r) => Math.max(m, r.iteration), 0);
    renderMetricCharts(rows, maxIter);
    renderPhases(rows.filter((r) => r.attempt === trial.attempt), maxIter);
  }
  function renderConfig(config) {
    const body = document.querySelector("#config tbody");
    body.replaceChildren();
    for (const [k, v] of Object.entries(kit.flatten(config))) {
      const tr = el("tr"); tr.append(el("th", {}, k), el("td", {}, kit.fmt(v)));
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

  // --- stack ----------------------------------------------------------------------------
  const stackBox = document.getElementById("trial-stack");
  const renderStack = (s) => window.raywatch.renderStack(stackBox, s);
  const stackUrl = "/api/trials/" + trial.id + "/stack"; // GET the newest, POST take one
  async function takeStack(button) {
    const error = document.getElementById("take-stack-error");
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    button.disabled = true;
    error.hidden = true;
    try {
      const reply = await fetch(stackUrl, {
        method: "POST", credentials: "same-origin",
        headers: { "X-CSRFToken": input ? input.value : "" },
      });
      const body = await reply.json().catch(() => ({}));
      if (reply.ok) renderStack(body.stack);
      else { error.textContent = "Could not ask for a stack: " + (body.detail || reply.statusText); error.hidden = false; }
    } finally {
      button.disabled = false;
    }
  }
  // The push of a stack's outcome is the way it arrives; the channel layer is at-most-once,
  // so while one is being taken it is also read again every few seconds.
  async function rereadStack() {
    if (stackBox.dataset.state !== "pending" || document.visibilityState !== "visible") return;
    const reply = await fetch(stackUrl, { credentials: "same-origin" });
    if (reply.ok) renderStack((await reply.json()).stack);
  }
  const takeButton = document.getElementById("take-stack");
  if (takeButton) takeButton.addEventListener("click", () => takeStack(takeButton));
  document.getElementById("refresh-output").addEventListener("click", loadOutput);

  // --- an RL run's calls running now (its trainer's job's, from Ray) --------------------
  function renderCalls(calls) {
    const section = document.getElementById("run-calls");
    section.hidden = calls === null || calls === undefined;
    if (!section.hidden) {
      window.raywatch.calls.render(document.getElementById("calls"),
        document.getElementById("calls-empty"), calls, false);
    }
  }

  // --- a Ray Train run's workers (Train's state API: its latest attempt's ranks) -----------
  function renderTrain(train) {
    const section = document.getElementById("train-run");
    section.hidden = !train;
    if (!train) return;
    document.getElementById("train-summary").textContent = train.source === "logs"
      ? "as each rank's own Ray Train log says (Train's state tracking is off) · world size " +
        train.world_size
      : "Ray Train says " + train.status +
        (train.status_detail ? " (" + train.status_detail + ")" : "") + " · " +
        train.attempts + " attempt(s) · run " + train.run_id;
    const body = document.querySelector("#train-workers tbody");
    body.replaceChildren(...train.workers.map((w) => {
      const tr = el("tr");
      tr.append(el("td", {}, w.rank), el("td", {}, w.node_ip || "–"), el("td", {}, w.pid || "–"),
        el("td", {}, w.step === null || w.step === undefined ? "–" : String(w.step)),
        el("td", {}, w.gpu_ids.length ? w.gpu_ids.join(", ") : "none"),
        el("td", {}, ((w.state || "") + " " + (w.actor_id || "").slice(0, 8)).trim() || "–"));
      return tr;
    }));
  }

  renderFacts();
  renderCalls(initial.calls);
  renderTrain(initial.train);
  renderIncidents(initial.incidents);
  addResults(initial.results, true);
  renderConfig(initial.trial.config);
  renderStack(initial.stack);
  loadOutput();
  setInterval(renderLastResult, 5000);
  setInterval(() => {  // a running trial's output moves: follow it while the page is seen
    if (trial.status === "RUNNING" && document.visibilityState === "visible") loadOutput();
  }, 10000);
  setInterval(() => rereadStack().catch(() => {}), 5000);
  window.raywatch.connect("/ws/trials/" + trial.id + "/", {
    trial: (t) => { trial = t; renderFacts(); },
    results: (rows) => addResults(rows, true),
    points: (rows) => addResults(rows, false),
    incidents: renderIncidents,
    stack: renderStack,
    calls: renderCalls,
    train: renderTrain,
  });
})();
