// GPU tiles, shared by the GPU wall, the node page and the GPU page: number formats,
// one tile per GPU built once and then updated in place, and a grid of tiles that
// takes pushes by uuid. A cluster of 512 GPUs sends ~64 pushes a second, so pushes
// only record the latest tile per uuid and the DOM is touched once per frame.
(function () {
  "use strict";
  const el = window.raywatch.el;

  // Worst first, as dashboard/gpus/views_data.py:gpu_state decides them.
  const STATES = [
    ["stale", "no reading from its node for a while"],
    ["hardware", "uncorrected ECC errors or hardware slowdown"],
    ["orphan", "memory held by a process no live Ray worker owns"],
    ["hot", "at or above 85 °C"],
    ["idle", "processes hold it, but it is not computing"],
    ["free", "not computing, no processes"],
    ["busy", "computing"],
  ];
  const STATE_HELP = Object.fromEntries(STATES);

  const missing = (v) => v === null || v === undefined;
  function bytes(n) {
    if (missing(n)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function percent(v) { return missing(v) ? "–" : Math.round(v) + "%"; }
  function memory(used, total) {
    if (missing(used) && missing(total)) return "mem –";
    return bytes(used) + " / " + bytes(total);
  }
  function temperature(c) { return missing(c) ? "– °C" : Math.round(c) + " °C"; }
  function power(w, limit) {
    if (missing(w)) return "– W";
    return Math.round(w) + (missing(limit) ? "" : " / " + Math.round(limit)) + " W";
  }
  const duration = window.raywatch.time.duration;
  function shortName(name) { return (name || "").replace(/^NVIDIA /, ""); }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  // Distinct owners of a GPU's processes, orphans first.
  function owners(gpu) {
    const seen = new Map();
    for (const p of gpu.processes || []) {
      const o = p.owner;
      seen.set(o.kind + "|" + o.label + "|" + (o.url || ""), o);
    }
    return [...seen.values()].sort((a, b) =>
      (b.kind === "orphan") - (a.kind === "orphan") || a.label.localeCompare(b.label));
  }

  function ownerNode(o) {
    const attrs = { class: "owner owner-" + o.kind, title: o.reason || o.kind };
    if (o.url) return el("a", { ...attrs, href: o.url }, o.label);
    return el("span", attrs, o.label);
  }

  function buildTile(gpu) {
    const t = {
      root: el("div", { class: "gpu-tile", "data-uuid": gpu.uuid }),
      link: el("a", { class: "tile-link" }),
      sim: el("span", { class: "badge simulated" }, "SIMULATED"),
      util: el("div", { class: "tile-util", "data-field": "utilization" }),
      fill: el("div", { class: "bar-fill" }),
      mem: el("span", { "data-field": "memory" }),
      temp: el("span", { "data-field": "temperature" }),
      power: el("span", { "data-field": "power" }),
      owner: el("div", { class: "tile-owner", "data-field": "owner" }),
      gpu: null, state: null, ownerKey: null, search: "",
    };
    const head = el("div", { class: "tile-head" });
    head.append(t.link, t.sim);
    const bar = el("div", { class: "bar" });
    bar.append(t.fill);
    const facts = el("div", { class: "tile-facts" });
    facts.append(t.mem, t.temp, t.power);
    t.root.append(head, t.util, bar, facts, t.owner);
    updateTile(t, gpu);
    return t;
  }

  function updateTile(t, gpu) {
    t.gpu = gpu;
    if (t.link.getAttribute("href") !== gpu.url) t.link.setAttribute("href", gpu.url);
    setText(t.link, "GPU " + gpu.index + (gpu.name ? " · " + shortName(gpu.name) : ""));
    const full = "GPU " + gpu.index + (gpu.name ? " · " + gpu.name : "") + " on " + gpu.node;
    if (t.link.title !== full) t.link.title = full;
    t.sim.hidden = !gpu.simulated;
    setText(t.util, percent(gpu.utilization));
    const width = missing(gpu.utilization) ? "0%" : Math.max(0, Math.min(100, gpu.utilization)) + "%";
    if (t.fill.style.width !== width) t.fill.style.width = width;
    setText(t.mem, memory(gpu.memory_used, gpu.memory_total));
    setText(t.temp, temperature(gpu.temperature));
    setText(t.power, power(gpu.power, gpu.power_limit));
    if (t.state !== gpu.state) {
      if (t.state) t.root.classList.remove("state-" + t.state);
      t.root.classList.add("state-" + gpu.state);
      t.root.dataset.state = gpu.state;
      t.state = gpu.state;
    }
    const title = gpu.state + ": " + STATE_HELP[gpu.state] + "\n" + gpu.uuid +
      (gpu.throttle_reasons && gpu.throttle_reasons.length ? "\nthrottled: " + gpu.throttle_reasons.join(", ") : "") +
      (gpu.ecc_uncorrected ? "\nuncorrected ECC errors: " + gpu.ecc_uncorrected : "") +
      "\nread " + window.raywatch.time.abs(gpu.at);
    if (t.root.title !== title) t.root.title = title;
    renderOwners(t, gpu);
    t.search = [gpu.node, gpu.node_ip, gpu.owner, gpu.name, gpu.uuid].join(" ").toLowerCase();
  }

  function renderOwners(t, gpu) {
    const list = owners(gpu);
    const key = JSON.stringify(list);
    if (key === t.ownerKey) return;
    t.ownerKey = key;
    t.owner.replaceChildren();
    if (!list.length) { t.owner.append(el("span", { class: "muted" }, "no processes")); return; }
    list.slice(0, 2).forEach((o, i) => { if (i) t.owner.append(", "); t.owner.append(ownerNode(o)); });
    if (list.length > 2) t.owner.append(" +" + (list.length - 2));
  }

  // Tiles by uuid in `container`, grouped by node when `grouped`. apply() takes a
  // push (the latest tile per uuid wins), flush() draws what is pending.
  class TileGrid {
    constructor(container, { grouped = false, onFlush = null } = {}) {
      this.container = container;
      this.grouped = grouped;
      this.onFlush = onFlush;
      this.tiles = new Map();
      this.groups = new Map();
      this.pending = new Map();
      this.keep = null;
      this.frame = 0;
      this.match = () => true;
    }

    apply(gpus, complete) {
      for (const gpu of gpus) this.pending.set(gpu.uuid, gpu);
      if (complete) this.keep = new Set(gpus.map((g) => g.uuid));
      if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
    }

    flush() {
      this.frame = 0;
      const touched = new Set();
      if (this.keep) {
        for (const [uuid, t] of this.tiles) if (!this.keep.has(uuid) && !this.pending.has(uuid)) this.remove(t, touched);
        this.keep = null;
      }
      for (const gpu of this.pending.values()) touched.add(this.put(gpu));
      this.pending.clear();
      for (const group of touched) this.showGroup(group);
      if (this.onFlush) this.onFlush(this);
    }

    put(gpu) {
      let t = this.tiles.get(gpu.uuid);
      const wasSearch = t && t.search, wasState = t && t.state;
      if (!t) {
        t = buildTile(gpu);
        this.tiles.set(gpu.uuid, t);
        this.insert(t);
      } else {
        if (this.grouped && t.gpu.node !== gpu.node) { this.detach(t); t.gpu = gpu; this.insert(t); }
        updateTile(t, gpu);
      }
      if (t.search !== wasSearch || t.state !== wasState) t.root.hidden = !this.match(t);
      return t.root.parentElement;
    }

    remove(t, touched) {
      touched.add(t.root.parentElement);
      this.detach(t);
      this.tiles.delete(t.gpu.uuid);
    }

    detach(t) {
      const parent = t.root.parentElement;
      t.root.remove();
      if (this.grouped && parent && !parent.children.length) {
        const section = parent.closest(".gpu-node");
        this.groups.delete(section.dataset.node);
        section.remove();
      }
    }

    insert(t) {
      const parent = this.grouped ? this.group(t.gpu) : this.container;
      const before = [...parent.children].find((c) => this.tiles.get(c.dataset.uuid).gpu.index > t.gpu.index);
      parent.insertBefore(t.root, before || null);
    }

    group(gpu) {
      let tiles = this.groups.get(gpu.node);
      if (tiles) return tiles;
      const section = el("section", { class: "gpu-node", "data-node": gpu.node });
      const head = el("h2", {});
      head.append(el("span", { class: "node-name" }, gpu.node), " ", el("span", { class: "muted" }, gpu.node_ip));
      tiles = el("div", { class: "tiles" });
      section.append(head, tiles);
      const before = [...this.container.children].find((c) => c.dataset.node > gpu.node);
      this.container.insertBefore(section, before || null);
      this.groups.set(gpu.node, tiles);
      return tiles;
    }

    showGroup(tiles) {
      if (!this.grouped || !tiles || !tiles.isConnected) return;
      const section = tiles.closest(".gpu-node");
      section.hidden = ![...tiles.children].some((c) => !c.hidden);
    }

    setFilter(match) {
      this.match = match;
      for (const t of this.tiles.values()) t.root.hidden = !match(t);
      for (const tiles of this.groups.values()) this.showGroup(tiles);
    }

    counts() {
      const out = { shown: 0, simulated: 0, total: this.tiles.size, states: {} };
      for (const t of this.tiles.values()) {
        out.states[t.state] = (out.states[t.state] || 0) + 1;
        if (!t.root.hidden) out.shown++;
        if (t.gpu.simulated) out.simulated++;
      }
      return out;
    }
  }

  window.raywatch.gpus = {
    STATES, bytes, percent, memory, temperature, power, duration, shortName, setText,
    ownerNode, TileGrid,
  };
})();
