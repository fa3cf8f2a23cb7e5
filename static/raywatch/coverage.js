// Node agent coverage on the Cluster page: the Agent column of the node table and the
// agents whose node is no Ray node. Read from /api/agents/coverage/ every refresh_s
// (a silent agent turns stale without any event to push); ages tick every second.
(function () {
  "use strict";
  const el = window.raywatch.el;
  let data = null;
  let fetchedAt = 0; // performance.now() when `data` came

  // Seconds since `iso`, on the server's clock (the browser's may be off).
  function ageS(iso) {
    if (!iso || !data) return null;
    const skew = Date.parse(data.server_time) - Date.parse(iso);
    return Math.max(0, (skew + performance.now() - fetchedAt) / 1000);
  }
  const span = window.raywatch.time.age;
  const when = window.raywatch.time.abs;
  function line(cls, ...parts) {
    const p = el("div", { class: "cov-line " + cls });
    p.append(...parts);
    return p;
  }
  function ticking(prefix, iso, suffix) {
    return el("span", { class: "cov-age", "data-since": iso, "data-prefix": prefix,
      "data-suffix": suffix || "" }, prefix + span(ageS(iso)) + (suffix || ""));
  }
  function items(list) {
    const out = [];
    list.forEach((item, i) => {
      if (i) out.push(" · ");
      out.push(el("span", { class: "cov-item", "data-what": item.what, title: item.detail }, item.text));
    });
    return out;
  }
  function groupedBy(list) {
    const groups = new Map();
    for (const item of list) groups.set(item.by, [...(groups.get(item.by) || []), item]);
    return groups;
  }

  function agentLines(a) {
    const lines = [];
    const version = a.version ? "v" + a.version : "version not reported yet";
    if (a.state === "connected") {
      const last = a.last_report_at || a.last_heard_at;
      lines.push(line("cov-facts", version, " · ", ticking("last report ", last, " ago")));
      lines.push(line("cov-facts muted", a.nvml_error ? "" : a.gpus + " GPU" + (a.gpus === 1 ? "" : "s") + " · ",
        a.processes + " process" + (a.processes === 1 ? "" : "es") + " watched"));
      if (a.nvml_error) lines.push(line("cov-warn", "NVML: " + a.nvml_error));
    } else if (a.state === "stale") {
      lines.push(line("cov-facts", "no report since ", el("span", { class: "cov-time" }, when(a.stale_since)),
        " (", ticking("", a.stale_since, ""), ") · " + version));
    }
    if (a.spool_dropped) {
      lines.push(line("cov-warn", "spool full: " + a.spool_dropped + " batch" +
        (a.spool_dropped === 1 ? "" : "es") + " dropped on the node"));
    }
    if (a.problem) lines.push(line("cov-warn", a.problem));
    for (const problem of a.problems || []) lines.push(line("cov-warn", problem));
    return lines;
  }

  function badge(c) {
    return el("span", { class: "coverage coverage-" + c.state }, c.label);
  }

  function fill(td, c) {
    td.replaceChildren(badge(c));
    td.dataset.coverage = c.state;
    const a = c.agent;
    if (a) td.append(...agentLines(a));
    if (a && c.matched_by === "address") {
      td.append(line("muted", "by address: its token is for node ", el("b", {}, a.node)));
    }
    if (c.lost && c.lost.length) {
      const head = { none: "lost here: ", stale: "while it is silent: ",
        connected: "not from agents yet: " }[c.state];
      td.append(line(c.state === "connected" ? "cov-gap" : "cov-lost",
        el("span", { class: "cov-head" }, head), ...items(c.lost)));
    }
    if (c.raywatch_host && c.state === "connected") td.append(line("muted", "raywatch's own host"));
    if (c.state !== "connected" && c.covered_here && c.covered_here.length) {
      for (const [by, list] of groupedBy(c.covered_here)) {
        td.append(line("cov-kept", el("span", { class: "cov-head" }, "read by " + by + ": "),
          ...items(list)));
      }
    }
  }

  function paintNodes() {
    if (!data) return;
    const byId = new Map(data.nodes.map((c) => [c.node_id, c]));
    for (const tr of document.querySelectorAll("#nodes tbody tr[data-node-id]")) {
      const td = tr.querySelector("td.agent");
      const c = byId.get(tr.dataset.nodeId);
      if (td && c) fill(td, c);
    }
  }

  function paintAgentOnly() {
    const section = document.getElementById("agent-only");
    const body = document.querySelector("#agent-only-nodes tbody");
    if (!section || !body || !data) return;
    section.hidden = data.agent_only.length === 0;
    body.replaceChildren();
    for (const a of data.agent_only) {
      const td = el("td", { class: "agent" });
      fill(td, { state: a.state, label: a.label, agent: a });
      const tr = el("tr", { "data-agent-node": a.node });
      tr.append(el("td", { class: "id" }, a.node), el("td", {}, a.node_ip || "–"), td);
      body.append(tr);
    }
  }

  function tick() {
    for (const age of document.querySelectorAll(".cov-age[data-since]")) {
      age.textContent = age.dataset.prefix + span(ageS(age.dataset.since)) + age.dataset.suffix;
    }
  }

  function showError(text) {
    const p = document.getElementById("coverage-error");
    if (!p) return;
    p.hidden = !text;
    p.textContent = text ? "Agent coverage could not be read: " + text : "";
  }

  async function refresh() {
    let wait = data ? data.refresh_s : 5;
    try {
      const reply = await fetch("/api/agents/coverage/", {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!reply.ok) throw new Error("HTTP " + reply.status);
      data = await reply.json();
      fetchedAt = performance.now();
      wait = data.refresh_s;
      showError("");
      paintNodes();
      paintAgentOnly();
    } catch (e) {
      showError(e.message || String(e));
    }
    setTimeout(refresh, wait * 1000);
  }

  document.addEventListener("raywatch:nodes-rendered", paintNodes);
  setInterval(tick, 1000);
  refresh();
})();
