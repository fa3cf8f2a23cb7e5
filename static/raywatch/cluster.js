// Cluster overview: totals, a per-node usage chart and the node table, live.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const T = window.raywatch.time;

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function num(n) { return n === null || n === undefined ? "?" : (+n.toFixed(2)).toString(); }
  function usedOf(pair, fmt) {
    if (!pair || !pair.total) return "–";
    return fmt(pair.used) + " / " + fmt(pair.total);
  }
  function resource(node, name, fmt) {
    const r = node.resources[name];
    if (!r) return "–";
    return (r.used === null ? "?" : fmt(r.used)) + " / " + fmt(r.total);
  }

  function renderTotals(t) {
    const set = (key, text) => {
      document.querySelector('[data-total="' + key + '"]').textContent = text;
    };
    set("nodes", t.nodes_alive + " alive" + (t.nodes_dead ? ", " + t.nodes_dead + " dead" : ""));
    set("cpu", usedOf(t.cpu, num));
    set("gpu", t.gpu.total ? usedOf(t.gpu, num) : "no GPUs");
    set("memory_bytes", usedOf(t.memory_bytes, bytes));
    set("object_store_bytes", usedOf(t.object_store_bytes, bytes));
  }

  function since(n) {
    const td = el("td", { class: "since" });
    if (n.state === "DEAD" && n.ended_at) td.append("dead since ", T.el(n.ended_at));
    else if (n.started_at) td.append(T.el(n.started_at));
    else td.append("–");
    return td;
  }

  function renderNodes(nodes, many) {
    const body = document.querySelector("#nodes tbody");
    body.replaceChildren();
    for (const n of nodes) {
      const tr = el("tr", { "data-node-id": n.node_id, "data-cluster": n.cluster,
                            class: "node-" + n.state.toLowerCase() });
      const name = el("td", { title: n.node_id });
      if (many) name.append(el("span", { class: "cluster-tag" }, n.cluster), " ");
      name.append(el("a", { href: "/nodes/" + encodeURIComponent(n.node_id) + "/" },
        (n.hostname || n.node_ip) + " · " + n.node_id.slice(0, 8)));
      tr.append(
        name,
        el("td", {}, n.is_head ? "head" : "worker"),
        el("td", { class: "state", title: n.state_message || "" }, n.state),
        el("td", { class: "num" }, n.node_ip),
        el("td", { class: "num", "data-col": "cpu" }, resource(n, "CPU", num)),
        el("td", { class: "num", "data-col": "gpu" }, resource(n, "GPU", num)),
        el("td", { class: "num" }, n.mem_total_bytes ? bytes(n.mem_used_bytes) + " / " + bytes(n.mem_total_bytes) : "–"),
        el("td", { class: "num" }, n.object_store_total_bytes ? bytes(n.object_store_used_bytes) + " / " + bytes(n.object_store_total_bytes) : "–"),
        el("td", { class: "num" }, n.cpu_percent === null ? "–" : n.cpu_percent.toFixed(0) + "%"),
        since(n),
        el("td", { class: "agent", "data-col": "agent" }),
      );
      body.append(tr);
    }
    // coverage.js fills the Agent column from the agents' own endpoint.
    document.dispatchEvent(new CustomEvent("raywatch:nodes-rendered"));
  }

  function renderChart(nodes) {
    if (!window.Plotly) return;
    const alive = nodes.filter((n) => n.state === "ALIVE");
    const names = alive.map((n) => (n.is_head ? "head " : "") + n.node_id.slice(0, 8));
    const share = (n, key) => {
      const r = n.resources[key];
      return r && r.total && r.used !== null ? (100 * r.used) / r.total : null;
    };
    const traces = [
      { name: "CPU", type: "bar", x: names, y: alive.map((n) => share(n, "CPU")) },
      { name: "GPU", type: "bar", x: names, y: alive.map((n) => share(n, "GPU")) },
      { name: "object store", type: "bar", x: names,
        y: alive.map((n) => n.object_store_total_bytes ? (100 * (n.object_store_used_bytes || 0)) / n.object_store_total_bytes : null) },
    ];
    window.raywatch.charts.draw("usage-chart", traces, {
      barmode: "group", height: 220, x: { showgrid: false }, y: { title: "in use", unit: "%", range: [0, 100] },
    }, { displayModeBar: false });
  }

  // Which cluster, whether it answers, and its sessions.
  function renderIdentity(c) {
    const line = document.getElementById("cluster-identity");
    const ended = document.getElementById("cluster-ended");
    document.getElementById("sessions").hidden = !c;
    if (!c) {
      line.replaceChildren("raywatch has not reached Ray yet: see the status strip.");
      ended.hidden = true;
      return;
    }
    document.getElementById("cluster-name").textContent = c.name;
    const current = c.sessions.find((s) => !s.ended_at);
    line.replaceChildren(
      el("span", { class: "cluster-state state-" + c.state }, c.state),
      c.ray_version ? " · Ray " + c.ray_version : "",
      c.dashboard_url ? " · " + c.dashboard_url : "",
      current ? " · session since " : "", current ? T.el(current.first_seen_at) : "");
    if (c.state === "active") {
      ended.hidden = true;
    } else {
      ended.hidden = false;
      ended.replaceChildren(c.state === "ended"
        ? "Ended: " + c.end_reason + ". What raywatch stored of it stays below and on every page."
        : "Not answering since ", c.state === "ended" ? "" : T.el(c.state_since),
        c.last_error && c.state !== "ended" ? " (" + c.last_error + "). The figures below are its last known." : "");
    }
    const body = document.querySelector("#sessions-table tbody");
    body.replaceChildren(...c.sessions.map((s) => {
      const tr = el("tr", { "data-session": s.session_name });
      const first = el("td", {}), last = el("td", {});
      first.append(T.el(s.first_seen_at));
      last.append(T.el(s.last_seen_at));
      tr.append(el("td", { class: "mono" }, s.session_name), el("td", {}, s.ray_version || "–"),
        first, last);
      const end = el("td", {});
      if (s.ended_at) end.append(T.el(s.ended_at), el("div", { class: "muted" }, s.end_reason));
      else end.append("current");
      tr.append(end);
      return tr;
    }));
  }

  // Unscoped with several clusters: one row per cluster (does it answer, how big, how busy,
  // what is on fire); its name scopes every page to it.
  function renderClusters(rows) {
    const section = document.getElementById("clusters-overview");
    section.hidden = !rows.length;
    if (!rows.length) return;
    document.getElementById("cluster-name").textContent = "all clusters";
    document.getElementById("cluster-identity").replaceChildren(
      rows.length + " clusters; pick one in the header to see only its nodes, jobs, " +
      "experiments and alerts.");
    document.querySelector("#clusters-table tbody").replaceChildren(...rows.map((c) => {
      const tr = el("tr", { "data-cluster": c.name });
      const name = el("td", {});
      name.append(el("a", { href: "/cluster/?cluster=" + encodeURIComponent(c.name) }, c.name),
        c.is_default ? el("span", { class: "muted" }, " (RAY_ADDRESS)") : "");
      const state = el("td", { class: "state", title: c.end_reason || c.last_error || "" });
      // Announced by its head's agent and not approved: never polled, so no state yet.
      const shown = c.approval === "approved" ? c.state : c.approval;
      state.append(el("span", { class: "cluster-state state-" + shown }, shown));
      if (c.approval === "pending") state.append(el("div", { class: "muted" }, "announced by its head's agent: an admin approves it"));
      // Never applied by itself: where raywatch sends the cluster's Ray token stays put.
      if (c.claim) state.append(el("div", { class: "state-down" }, "its head's agent " + c.claim.by + "… claims " +
        [c.claim.gcs_address && "GCS " + c.claim.gcs_address, c.claim.dashboard_url && "dashboard " + c.claim.dashboard_url].filter(Boolean).join(", ") +
        ": an admin approves it with that, or keeps what it has (cluster approve)"));
      const last = el("td", {});
      if (c.last_seen_at) last.append(T.el(c.last_seen_at)); else last.append("never");
      const gpus = c.gpus && c.gpus.total ? num(c.gpus.used) + " / " + num(c.gpus.total) : "–";
      tr.append(name, state, el("td", { class: "num" }, String(c.nodes_alive)),
        el("td", { class: "num" }, gpus),
        el("td", { class: "num" + (c.open_incidents ? " firing" : "") }, String(c.open_incidents)),
        last, el("td", {}, c.ray_version || "–"));
      return tr;
    }));
  }

  // One cluster's history: alive nodes over time, GPU-hours per experiment. Only the page
  // and the socket's first message carry it (not every node update): kept until then.
  function renderHistory(h) {
    if (h === undefined) return;
    const section = document.getElementById("history");
    section.hidden = !h || (!h.nodes.length && !h.gpu_hours.length);
    if (section.hidden) return;
    if (window.Plotly && h.nodes.length) {
      const xs = h.nodes.map((p) => p.at), ys = h.nodes.map((p) => p.alive);
      xs.push(new Date().toISOString());
      ys.push(ys[ys.length - 1]);
      window.raywatch.charts.draw("nodes-chart", [{ name: "alive nodes", type: "scatter",
        mode: "lines", line: { shape: "hv" }, x: xs, y: ys }],
        { height: 200, x: { type: "date" },
          y: { title: "alive nodes", rangemode: "tozero", integer: true } },
        { displayModeBar: false });
    }
    const body = document.querySelector("#gpu-hours tbody");
    body.replaceChildren(...h.gpu_hours.map((r) => {
      const name = el("td", {});
      name.append(el("a", { href: "/experiments/" + r.experiment_id + "/" }, r.experiment));
      const tr = el("tr", { "data-experiment": r.experiment });
      tr.append(name, el("td", { class: "num" }, num(r.gpu_hours)),
        el("td", { class: "num" }, String(r.trials)));
      return tr;
    }));
    if (!h.gpu_hours.length) {
      const none = el("tr", {});
      none.append(el("td", { colspan: "3", class: "muted" }, "No trial has held a GPU yet."));
      body.append(none);
    }
  }

  function render(cluster) {
    const many = (cluster.clusters || []).length > 0;
    renderHistory(cluster.history);
    if (many) document.getElementById("sessions").hidden = true;
    else renderIdentity(cluster.identity);
    renderClusters(cluster.clusters || []);
    if (many) document.getElementById("cluster-ended").hidden = true;
    renderTotals(cluster.totals);
    renderNodes(cluster.nodes, many);
    renderChart(cluster.nodes);
    document.getElementById("as-of").replaceChildren("Updated ", T.el(new Date(), { ago: false }));
  }

  render(JSON.parse(document.getElementById("cluster-initial").textContent));
  window.raywatch.connect("/ws/cluster/", { cluster: render });
})();
