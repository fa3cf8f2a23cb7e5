// One GPU: its facts, four history charts (range buttons, zoom refetches from the
// server) that grow live while they show a live window, and its processes.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const gpus = window.raywatch.gpus;
  const H = window.raywatch.history;
  const GiB = 1024 ** 3;
  const FINE_MS = 5000; // buckets up to this size take every live reading as a point
  const charts = ["util-chart", "memory-chart", "power-chart", "temperature-chart"]
    .map((id) => document.getElementById(id));
  let tile = JSON.parse(document.getElementById("gpu-initial").textContent);
  let drawn = null; // {bucket_ms, times}: the buckets the charts show, oldest first
  let bucket = null; // live readings of a coarse bucket that is not drawn yet

  const gib = (v) => (v === null || v === undefined ? null : v / GiB);
  const line = (name, x, y, color) => ({
    name, x, y, type: "scatter", mode: "lines",
    line: { color, width: 1.5 }, connectgaps: false,
  });

  function utilTraces(x, min, max, mean) {
    const edge = { type: "scatter", mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false };
    return [
      { ...edge, name: "min", x, y: min },
      { ...edge, name: "max", x: [...x], y: max, fill: "tonexty", fillcolor: "rgba(76,154,255,0.2)" },
      line("utilization", [...x], mean, "#4c9aff"),
    ];
  }

  function render(data, range) {
    const s = data.series;
    const times = s.t.map((t) => Date.parse(t));
    const x = times.map(H.axisTime);
    drawn = { bucket_ms: data.bucket_s * 1000, times, source: data.source };
    bucket = null;
    const memTop = tile.memory_total ? { range: [0, (tile.memory_total / GiB) * 1.02] } : {};
    return Promise.all([
      Plotly.react(charts[0], utilTraces(x, s.utilization_min, s.utilization_max, s.utilization),
        H.layout("%", range, { range: [0, 101] }), H.CONFIG),
      Plotly.react(charts[1], [line("memory used", [...x], s.memory_used.map(gib), "#2fbf71")],
        H.layout("GiB", range, memTop), H.CONFIG),
      Plotly.react(charts[2], [line("power", [...x], s.power, "#e0a526")], H.layout("W", range), H.CONFIG),
      Plotly.react(charts[3], [line("temperature", [...x], s.temperature, "#e5484d")],
        H.layout("°C", range), H.CONFIG),
    ]).then(mark);
  }

  function mark() {
    for (const chart of charts) {
      chart.dataset.points = String(chart.data[chart.data.length - 1].x.length);
      chart.dataset.bucketS = String(drawn.bucket_ms / 1000);
      chart.dataset.source = drawn.source;
    }
  }

  // A live reading joins the charts when its bucket is complete (or at once when
  // buckets are about one reading each); the oldest points leave the window.
  function takeReading(g) {
    const at = Date.parse(g.at);
    const start = Math.floor(at / drawn.bucket_ms) * drawn.bucket_ms;
    const last = drawn.times.length ? drawn.times[drawn.times.length - 1] : -Infinity;
    if (start <= last) return; // a bucket the server drew already, or a repeated reading
    if (drawn.bucket_ms <= FINE_MS) {
      append(start, point([g]));
      return;
    }
    if (bucket && bucket.start !== start) {
      append(bucket.start, point(bucket.readings));
      bucket = null;
    }
    if (!bucket) bucket = { start, readings: [] };
    bucket.readings.push(g);
  }

  function point(readings) {
    const values = (key) => readings.map((r) => r[key]).filter((v) => v !== null && v !== undefined);
    const mean = (key) => { const v = values(key); return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
    const util = values("utilization");
    return {
      util: mean("utilization"), min: util.length ? Math.min(...util) : null, max: util.length ? Math.max(...util) : null,
      memory: gib(mean("memory_used")), power: mean("power"), temperature: mean("temperature"),
    };
  }

  function append(t, p) {
    const span = view.span * 1000;
    drawn.times.push(t);
    let drop = 0;
    while (drop < drawn.times.length - 1 && drawn.times[drop] < t - span) drop++;
    drawn.times.splice(0, drop);
    const keep = drawn.times.length;
    const x = H.axisTime(t);
    const end = Math.max(Date.now(), t + drawn.bucket_ms);
    const range = [end - span, end].map(H.axisTime);
    const one = (v) => ({ x: [[x]], y: [[v]] });
    H.quietly(Promise.all([
      Plotly.extendTraces(charts[0], { x: [[x], [x], [x]], y: [[p.min], [p.max], [p.util]] }, [0, 1, 2], keep),
      Plotly.extendTraces(charts[1], one(p.memory), [0], keep),
      Plotly.extendTraces(charts[2], one(p.power), [0], keep),
      Plotly.extendTraces(charts[3], one(p.temperature), [0], keep),
    ]).then(() => Promise.all(charts.map((c) => Plotly.relayout(c, { "xaxis.range": range }))))).then(mark);
  }

  function renderFacts() {
    const set = (k, v, cls) => {
      const p = document.querySelector('[data-fact="' + k + '"]');
      gpus.setText(p, v);
      if (cls !== undefined) p.className = cls;
    };
    const known = (v, unit) => (v === null || v === undefined ? "–" : v + unit);
    set("state", tile.state, "gpu-state state-" + tile.state);
    document.getElementById("gpu-facts").dataset.state = tile.state;
    set("utilization", gpus.percent(tile.utilization));
    set("memory", gpus.memory(tile.memory_used, tile.memory_total));
    set("temperature", gpus.temperature(tile.temperature));
    set("power", gpus.power(tile.power, tile.power_limit));
    set("clocks", known(tile.sm_clock, " MHz") + " / " + known(tile.memory_clock, " MHz"));
    set("throttle", tile.throttle_reasons === null ? "unknown" : tile.throttle_reasons.join(", ") || "nothing");
    set("ecc", tile.ecc_uncorrected === null && tile.ecc_corrected === null ? "not reported"
      : known(tile.ecc_uncorrected, " uncorrected") + ", " + known(tile.ecc_corrected, " corrected"));
    set("at", window.raywatch.time.stamp(tile.at) + (tile.stale ? " (stale)" : ""));
  }

  // Each push (every second) brings every process again, its age one second older: a row
  // is rebuilt only when something else about it changed, its age written in place, so
  // the Kill… button an admin is about to click stays the same element.
  const processRows = window.raywatch.keyedRows(document.querySelector("#processes tbody"), processRow);

  function renderProcesses() {
    const rows = [...tile.processes].sort((a, b) =>
      (b.owner.kind === "orphan") - (a.owner.kind === "orphan") || (b.used_memory || 0) - (a.used_memory || 0));
    processRows(rows, (p) => p.pid, (p) => JSON.stringify({ ...p, age_s: null }));
    for (const p of rows) {
      const age = document.querySelector('#processes tr[data-pid="' + p.pid + '"] [data-col="age"]');
      gpus.setText(age, gpus.duration(p.age_s));
    }
    document.getElementById("no-processes").hidden = rows.length > 0;
  }

  function processRow(p) {
    const tr = el("tr", { "data-pid": p.pid, class: "owner-" + p.owner.kind });
    const owner = el("td", { "data-col": "owner" });
    if (!p.owner.label.toLowerCase().startsWith(p.owner.kind)) owner.append(el("span", { class: "kind" }, p.owner.kind), " ");
    owner.append(gpus.ownerNode(p.owner));
    if (p.owner.reason) owner.append(el("div", { class: "reason" }, p.owner.reason));
    tr.append(
      el("td", {}, p.pid), owner, el("td", {}, gpus.bytes(p.used_memory)),
      el("td", { "data-col": "age", title: "first seen " + window.raywatch.time.abs(p.first_seen_at) },
        gpus.duration(p.age_s)),
      el("td", {}, p.type),
    );
    const action = el("td", {});
    if (document.getElementById("processes").dataset.canKill === "1" && p.owner.kind === "orphan") {
      action.append(el("button", { type: "button", class: "danger",
                                   "data-kill-process": tile.uuid + "/" + p.pid }, "Kill…"));
    }
    tr.append(action);
    return tr;
  }

  function onGpus(data) {
    const mine = (data.gpus || []).find((g) => g.uuid === tile.uuid);
    if (!mine) return;
    tile = mine;
    renderFacts();
    renderProcesses();
    if (view.live && drawn && !view.loading) takeReading(mine);
  }

  renderFacts();
  renderProcesses();
  const view = new H.HistoryView({
    bar: document.getElementById("range-bar"), charts, status: document.getElementById("history-status"),
    initial: "1h", load: (query, signal) => H.fetchSamples(tile.uuid, query, signal), render,
  });
  window.raywatch.connect("/ws/gpus/", { gpus: onGpus });
})();
