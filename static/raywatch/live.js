// raywatch live updates: one websocket per page, reconnect with backoff, and
// the server re-sends current state on every (re)connect, so a page is never
// left showing stale data after a dropped socket or a server restart.
(function () {
  "use strict";

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setLiveState(state, text) {
    const badge = document.getElementById("live-state");
    if (!badge) return;
    badge.dataset.state = state;
    badge.textContent = text;
  }

  function renderHealth(sources) {
    const strip = document.getElementById("status-strip");
    if (!strip) return;
    strip.replaceChildren();
    for (const s of sources) {
      const item = el("span", {
        class: "source state-" + s.state, "data-source": s.label, title: s.reason || "",
      });
      item.append(el("b", {}, s.label), " " + s.state);
      if (s.reason && s.state !== "healthy") {
        item.append(": ", el("span", { class: "reason" }, s.reason));
      }
      strip.append(item);
    }
  }

  function renderAlertCount(summary) {
    const badge = document.getElementById("alert-count");
    if (!badge || !summary) return;
    badge.dataset.open = summary.open;
    badge.dataset.critical = summary.critical;
    badge.textContent = summary.open + " open alert" + (summary.open === 1 ? "" : "s");
    badge.title = "firing incidents nobody has acknowledged or silenced (" +
      summary.firing + " firing in all)";
  }

  let connected = false;
  const topicListeners = {};

  // Scripts other than the page's own (the action dialog) listen to a topic here.
  function onTopic(topic, fn) {
    (topicListeners[topic] = topicListeners[topic] || []).push(fn);
  }

  function connect(path, handlers) {
    connected = true;
    let delay = 500;
    const maxDelay = 15000;
    let socket = null;
    let closedByPage = false;

    function open() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      // A page scoped to one cluster (the header's switcher) gets that cluster's rows only.
      const cluster = document.body.dataset.cluster;
      const scoped = cluster ? (path.includes("?") ? "&" : "?") + "cluster=" + encodeURIComponent(cluster) : "";
      socket = new WebSocket(scheme + location.host + path + scoped);
      socket.onopen = function () {
        delay = 500;
        setLiveState("live", "live");
      };
      socket.onmessage = function (event) {
        let msg;
        try { msg = JSON.parse(event.data); } catch (e) { return; }
        if (msg.topic === "health") renderHealth(msg.data);
        if (msg.topic === "alerts") renderAlertCount(msg.data);
        for (const fn of topicListeners[msg.topic] || []) fn(msg.data, msg);
        const handler = handlers[msg.topic];
        if (handler) handler(msg.data, msg);
      };
      socket.onclose = function (event) {
        if (closedByPage) return;
        if (event.code === 4403) {
          setLiveState("denied", "not allowed: log in again");
          return;
        }
        const wait = Math.min(maxDelay, delay) * (0.75 + Math.random() * 0.5);
        setLiveState("reconnecting", "reconnecting in " + Math.round(wait / 1000) + " s");
        delay = Math.min(maxDelay, delay * 2);
        setTimeout(open, wait);
      };
    }
    window.addEventListener("beforeunload", function () {
      closedByPage = true;
      if (socket) socket.close();
    });
    open();
    return { get socket() { return socket; } };
  }

  // The header's cluster switcher: the choice is kept in a cookie (every page honours it),
  // and the page is drawn again for it.
  const switcher = document.getElementById("cluster-switch");
  if (switcher) {
    switcher.addEventListener("change", function () {
      document.cookie = "raywatch_cluster=" + encodeURIComponent(switcher.value) +
        "; path=/; max-age=31536000; SameSite=Lax";
      const url = new URL(location.href);
      url.searchParams.delete("cluster");
      location.assign(url.toString());
    });
  }

  // A page with no live parts of its own still keeps the header live.
  window.addEventListener("load", function () {
    if (!connected && document.getElementById("alert-count")) connect("/ws/alerts/", {});
  });

  // The non-zero counts of [count, what] pairs, as "1 infeasible, 2 queued in a search".
  function counted(pairs) {
    return pairs.filter(([n]) => n).map(([n, what]) => n + " " + what).join(", ");
  }

  // A live table's body whose rows are rebuilt only when what they show changed: a button
  // someone is about to click stays the same element while pushes (every second on some
  // pages) update the rows around it. A row replaced between mouse-down and mouse-up
  // loses the click. `make(item)` builds a row; each render names an item's row by
  // `idOf(item)` and what it shows by `keyOf(item)` (a string).
  function keyedRows(body, make) {
    const rows = new Map(); // id -> {key, tr}
    return function render(items, idOf, keyOf) {
      const seen = new Set();
      const wanted = items.map((item) => {
        const id = idOf(item), key = keyOf(item);
        seen.add(id);
        const known = rows.get(id);
        if (known && known.key === key) return known.tr;
        const tr = make(item);
        rows.set(id, { key: key, tr: tr });
        return tr;
      });
      for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
      if (wanted.length !== body.children.length || wanted.some((tr, n) => body.children[n] !== tr)) {
        body.replaceChildren(...wanted);
      }
    };
  }

  window.raywatch = Object.assign(window.raywatch || {}, { connect: connect, el: el,
    renderHealth: renderHealth, onTopic: onTopic, counted: counted, keyedRows: keyedRows });
})();
