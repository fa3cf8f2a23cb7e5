// Pending demand: what Ray cannot place yet, how long it has waited (ticking), and
// the verdict: it can never fit, or it waits for resources that others hold.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const gpus = window.raywatch.gpus;
  const KINDS = { actor: "actor", placement_group: "placement group", task: "tasks" };
  const FIRST = ["GPU", "CPU", "memory"];

  function rank(name) {
    const i = FIRST.indexOf(name);
    return i < 0 ? FIRST.length : i;
  }
  function amount(name, v) {
    return /memory/i.test(name) ? gpus.bytes(v) : String(+Number(v).toFixed(2));
  }
  function shape(resources) {
    return Object.keys(resources).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
      .map((k) => k + ": " + amount(k, resources[k])).join(", ");
  }

  function asks(d) {
    const same = new Map();
    for (const b of d.bundles) { const s = shape(b); same.set(s, (same.get(s) || 0) + 1); }
    const parts = [...same].map(([s, n]) => (n > 1 ? n + " × (" + s + ")" : s));
    const td = el("td", { class: "asks" });
    td.append(el("span", {}, parts.join(" + ") || "nothing"));
    if (d.count > 1) td.append(el("span", { class: "count" }, " × " + d.count));
    if (d.strategy) td.append(el("div", { class: "muted" }, "strategy: " + d.strategy));
    return td;
  }

  function verdict(d) {
    const td = el("td", { class: "verdict" });
    if (d.feasible === false) {
      td.append(el("span", { class: "verdict-infeasible" }, "infeasible — no node can ever fit it"));
    } else if (d.feasible === true && d.queued) {
      td.append(el("span", { class: "verdict-queued" }, "queued"));
    } else if (d.feasible === true) {
      td.append(el("span", { class: "verdict-waits" }, "waits"));
    } else {
      td.append(el("span", { class: "verdict-unknown" }, "not judged"));
    }
    // Blockers listed below (with their nodes' links): the lead only, not their names twice.
    const listed = d.feasible !== false && d.blockers && d.blockers.length > 0;
    const said = listed && d.lead ? d.lead : d.explanation;
    if (said) td.append(el("div", { class: "explanation" }, said));
    if (listed) {
      const list = el("ul", { class: "blockers" });
      for (const b of d.blockers) {
        const li = el("li", { "data-blocker": b.label });
        li.append(el("span", {}, b.label + " holds " + shape(b.resources) + " on "),
          el("a", { href: "/nodes/" + encodeURIComponent(b.node_id) + "/" }, b.node_ip));
        list.append(li);
      }
      td.append(list);
    }
    return td;
  }

  function row(d) {
    const tr = el("tr", { "data-demand": d.kind + ":" + d.key, class: d.feasible === false ? "infeasible" : "" });
    const what = el("td", { title: d.key });
    if (document.body.dataset.manyClusters && !document.body.dataset.cluster) {
      what.append(el("span", { class: "cluster-tag" }, d.cluster), " ");
    }
    what.append(el("span", {}, d.label));
    if (d.label !== d.key) what.append(el("div", { class: "muted mono" }, d.key));
    if (d.job_id && !d.label.endsWith("of job " + d.job_id)) what.append(el("div", { class: "muted" }, "job " + d.job_id));
    tr.append(el("td", {}, KINDS[d.kind] || d.kind), what, asks(d),
      el("td", { class: "waiting", "data-since": d.first_seen_at }, waited(d.first_seen_at)), verdict(d));
    return tr;
  }

  function waited(since) {
    return gpus.duration((Date.now() - Date.parse(since)) / 1000);
  }

  function render(list) {
    const rows = [...list].sort((a, b) =>
      (a.feasible === false ? 0 : 1) - (b.feasible === false ? 0 : 1) || Date.parse(a.first_seen_at) - Date.parse(b.first_seen_at));
    document.querySelector("#demands tbody").replaceChildren(...rows.map(row));
    document.getElementById("no-demands").hidden = rows.length > 0;
    document.getElementById("demands").hidden = rows.length === 0;
    const infeasible = rows.filter((d) => d.feasible === false).length;
    const queued = rows.filter((d) => d.feasible !== false && d.queued).length;
    document.getElementById("demand-count").textContent = window.raywatch.counted([
      [infeasible, "infeasible"], [rows.length - infeasible - queued, "waiting"],
      [queued, "queued in a search"]]);
  }

  function tick() {
    for (const td of document.querySelectorAll("#demands td[data-since]")) gpus.setText(td, waited(td.dataset.since));
  }

  render(JSON.parse(document.getElementById("demands-initial").textContent));
  setInterval(tick, 1000);
  window.raywatch.connect("/ws/demands/", { demands: render });
})();
