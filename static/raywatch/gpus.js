// The GPU wall: a page of nodes at a time (paged, filtered and counted on the server:
// /api/gpus/wall/), each GPU a tile coloured by state, updated in place from /ws/gpus/
// pushes of the nodes shown. Of other nodes the socket says only how many tiles changed;
// the page fetches itself again for the counts, at most every REFRESH_MS.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const gpus = window.raywatch.gpus;
  const REFRESH_MS = 5000;
  const filter = document.getElementById("gpu-filter");
  const wall = document.getElementById("gpu-wall");
  const chosen = new Set(); // states to show; none chosen: all
  const chips = new Map();
  let data = JSON.parse(document.getElementById("wall-initial").textContent);
  let page = data.page;
  let socket = null;

  const grid = new gpus.TileGrid(wall, { grouped: true });
  // What the server matched; a pushed tile of a shown node is held to it too.
  grid.match = function (t) {
    if (chosen.size && !chosen.has(t.state)) return false;
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    return words.every((w) => t.search.includes(w));
  };

  const start = new URLSearchParams(location.search);
  filter.value = start.get("q") || "";
  for (const s of (start.get("state") || "").split(",")) if (s) chosen.add(s);

  function buildLegend() {
    const box = document.getElementById("state-counts");
    for (const [state, help] of gpus.STATES) {
      const chip = el("button", {
        type: "button", class: "state-chip state-" + state, "data-state-count": state,
        title: state + ": " + help, "aria-pressed": String(chosen.has(state)),
      });
      const count = el("b", {}, "0");
      chip.append(el("i", { class: "swatch" }), " " + state + " ", count);
      chip.addEventListener("click", () => {
        chosen.has(state) ? chosen.delete(state) : chosen.add(state);
        chip.setAttribute("aria-pressed", String(chosen.has(state)));
        requery(0);
      });
      box.append(chip);
      chips.set(state, count);
    }
  }

  function render() {
    grid.apply(data.tiles, true);
    grid.flush(); // draw at once, not a frame later
    summarise();
    watch();
  }

  function summarise() {
    const n = (v) => Number(v).toLocaleString("en-US");
    for (const [state, count] of chips) gpus.setText(count, n(data.states[state] || 0));
    const total = data.gpus.total, nodes = data.nodes.total;
    const filtered = data.gpus.matched !== total ? " · " + n(data.gpus.matched) + " shown" : "";
    gpus.setText(document.getElementById("gpu-count"),
      n(total) + " GPU" + (total === 1 ? "" : "s") + " on " + n(nodes) + " node" + (nodes === 1 ? "" : "s") + filtered);
    const from = data.page_nodes.length ? (data.page - 1) * data.per_page + 1 : 0;
    const to = from ? from + data.page_nodes.length - 1 : 0;
    document.getElementById("wall-pager").hidden = data.pages <= 1;
    gpus.setText(document.getElementById("page-of"),
      "nodes " + n(from) + "–" + n(to) + " of " + n(data.nodes.matched));
    document.getElementById("page-prev").disabled = data.page <= 1;
    document.getElementById("page-next").disabled = data.page >= data.pages;
    document.getElementById("simulated-banner").hidden = !data.simulated;
    document.getElementById("gpu-empty").hidden = total > 0;
    document.getElementById("gpu-none-match").hidden = !total || data.gpus.matched > 0;
  }

  // Tell the socket which nodes are shown: it forwards their tiles only.
  function watch() {
    const s = socket && socket.socket;
    if (s && s.readyState === WebSocket.OPEN) {
      s.send(JSON.stringify({ type: "watch", nodes: data.page_nodes }));
    }
  }

  function query() {
    const q = new URLSearchParams();
    const text = filter.value.trim();
    if (text) q.set("q", text);
    if (chosen.size) q.set("state", [...chosen].join(","));
    if (page > 1) q.set("page", String(page));
    return q;
  }

  let asked = 0, fetchedAt = Date.now(), refreshTimer = null;
  async function fetchPage() {
    const q = query();
    const mine = ++asked;
    fetchedAt = Date.now();
    wall.setAttribute("aria-busy", "true");
    const api = new URLSearchParams(q);
    if (document.body.dataset.cluster) api.set("cluster", document.body.dataset.cluster);
    let reply;
    try {
      reply = await fetch("/api/gpus/wall/?" + api, { credentials: "same-origin" });
    } catch (e) {
      reply = null;
    }
    if (mine !== asked) return; // a newer question is on its way
    wall.setAttribute("aria-busy", "false");
    const problem = document.getElementById("wall-problem");
    if (!reply || !reply.ok) {
      let why = reply ? "the server answered " + reply.status : "the server did not answer";
      if (reply && reply.status === 400) {
        try { why = Object.entries(await reply.json()).map(([k, v]) => k + ": " + v).join("; "); } catch (e) { /* keep */ }
      }
      problem.hidden = false;
      problem.textContent = "Could not load the GPUs: " + why;
      return;
    }
    let body;
    try { body = await reply.json(); } catch (e) { body = null; }
    if (mine !== asked) return; // a newer question was asked while this body arrived
    if (!body) {
      problem.hidden = false;
      problem.textContent = "Could not load the GPUs: the server's answer was not JSON";
      return;
    }
    problem.hidden = true;
    data = body;
    page = data.page;
    const url = new URL(location.href);
    url.search = q.toString();
    history.replaceState(null, "", url);
    render();
  }

  function refreshSoon(after) {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; fetchPage(); },
      Math.max(0, after - (Date.now() - fetchedAt)));
  }

  let typing = null;
  function requery(delay) {
    page = 1;
    clearTimeout(typing);
    typing = setTimeout(fetchPage, delay);
  }

  buildLegend();
  filter.addEventListener("input", () => requery(150));
  document.getElementById("page-prev").addEventListener("click", () => { page = Math.max(1, page - 1); fetchPage(); });
  document.getElementById("page-next").addEventListener("click", () => { page += 1; fetchPage(); });
  render();
  // The address asked for more than the server drew (a parameter it could not use):
  // ask the API, which names what is wrong.
  if (filter.value.trim() !== data.query.text || [...chosen].join(",") !== data.query.states.join(",")
      || (Number(start.get("page")) || 1) !== data.query.page) fetchPage();
  socket = window.raywatch.connect("/ws/gpus/?paged=1", {
    gpus: (pushed, msg) => {
      // (Re)connected: the socket forgot what the page shows; the page may be old.
      if (msg && msg.snapshot) { watch(); if (Date.now() - fetchedAt > 1000) fetchPage(); return; }
      // A shown tile's new state moves the counts at once; a tile the page did not
      // have, or another node's, is counted by the next fetch.
      let unknown = false;
      for (const g of pushed.gpus) {
        const t = grid.tiles.get(g.uuid);
        if (!t) { unknown = true; continue; }
        if (t.state === g.state) continue;
        data.states[t.state] = Math.max(0, (data.states[t.state] || 0) - 1);
        data.states[g.state] = (data.states[g.state] || 0) + 1;
      }
      if (pushed.gpus.length) { grid.apply(pushed.gpus, false); summarise(); }
      const others = msg && msg.others;
      // A new node may belong on a page with room: ask sooner.
      const room = data.page >= data.pages && data.page_nodes.length < data.per_page;
      if (unknown || others || chosen.size || filter.value.trim()) refreshSoon(room && (unknown || others) ? 1000 : REFRESH_MS);
    },
  });
})();
