// Trial table of one experiment: live rows, sorting and filtering (copes with 1,000s).
(function () {
  "use strict";
  const el = window.raywatch.el;
  const table = document.getElementById("trials");
  const expId = table.dataset.experimentId;
  const trials = new Map();
  let sortKey = "trial_id", sortDir = 1;

  function lastMetric(t) {
    const keys = Object.keys(t.last_metrics || {}).filter((k) => !k.startsWith("time_") && !k.startsWith("timing"));
    if (!keys.length) return null;
    const k = keys[0];
    return { key: k, value: t.last_metrics[k] };
  }
  function fmt(v) { return v === null || v === undefined ? "–" : (typeof v === "number" ? (+v.toPrecision(5)).toString() : String(v)); }
  function age(iso) {
    if (!iso) return "–";
    const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
    return s < 90 ? s.toFixed(0) + " s ago" : s < 5400 ? (s / 60).toFixed(0) + " min ago" : (s / 3600).toFixed(1) + " h ago";
  }
  function sortValue(t) {
    if (sortKey === "last") { const m = lastMetric(t); return m ? m.value : null; }
    return t[sortKey];
  }
  function matches(t, text, status, unhealthy) {
    if (status && t.status !== status) return false;
    if (unhealthy && t.health === "ok") return false;
    if (!text) return true;
    const hay = (t.trial_id + " " + t.node_ip + " " + t.hostname + " " + JSON.stringify(t.last_metrics)).toLowerCase();
    return hay.includes(text);
  }
  function row(t) {
    const tr = el("tr", { "data-trial-id": t.trial_id, class: "health-" + t.health.replace(" ", "-") });
    const link = el("a", { href: "/trials/" + t.id + "/" }, t.trial_id);
    const first = el("td"); first.append(link);
    const m = lastMetric(t);
    tr.append(first,
      el("td", { class: "status status-" + t.status, title: t.status_reason }, t.status),
      el("td", {}, fmt(t.iteration)), el("td", {}, fmt(t.best_value)),
      el("td", {}, m ? m.key + " = " + fmt(m.value) : "–"), el("td", {}, fmt(t.last_step_s)),
      el("td", { "data-age": t.last_result_at || "" }, age(t.last_result_at)),
      el("td", {}, (t.node_ip || "–") + (t.pid ? " / " + t.pid : "")),
      el("td", { class: "health" }, t.health));
    return tr;
  }
  function render() {
    const text = document.getElementById("filter").value.trim().toLowerCase();
    const status = document.getElementById("status-filter").value;
    const unhealthy = document.getElementById("unhealthy-only").checked;
    const shown = [...trials.values()].filter((t) => matches(t, text, status, unhealthy));
    shown.sort((a, b) => {
      const x = sortValue(a), y = sortValue(b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sortDir;
    });
    const frag = document.createDocumentFragment();
    for (const t of shown) frag.append(row(t));
    table.tBodies[0].replaceChildren(frag);
    document.getElementById("count").textContent = shown.length + " of " + trials.size + " trials";
  }
  function upsert(rows, replace) {
    if (replace) trials.clear();
    for (const t of rows) trials.set(t.trial_id, t);
    render();
  }
  table.tHead.addEventListener("click", (ev) => {
    const key = ev.target.dataset.sort;
    if (!key) return;
    sortDir = key === sortKey ? -sortDir : 1;
    sortKey = key;
    render();
  });
  for (const id of ["filter", "status-filter", "unhealthy-only"]) {
    document.getElementById(id).addEventListener("input", render);
  }
  setInterval(() => {
    for (const cell of table.querySelectorAll("td[data-age]")) cell.textContent = age(cell.dataset.age);
  }, 5000);
  upsert(JSON.parse(document.getElementById("trials-initial").textContent), true);
  window.raywatch.connect("/ws/experiments/" + expId + "/", {
    trials: (rows, msg) => upsert(rows, !!(msg && msg.snapshot)),
  });
})();
