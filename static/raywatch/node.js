// One Ray node: what Ray says about it, its GPUs as live tiles (joined on IP: NVML
// sees the host), and per-metric history charts with one trace per GPU.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const gpus = window.raywatch.gpus;
  const H = window.raywatch.history;
  const GiB = 1024 ** 3;
  const REFRESH_MS = 15000; // a live window is re-read this often (or once per bucket)
  const node = JSON.parse(document.getElementById("node-initial").textContent);
  const charts = ["util-chart", "memory-chart", "power-chart", "temperature-chart"]
    .map((id) => document.getElementById(id));
  const METRICS = [["utilization", "%", 1, { range: [0, 101] }], ["memory_used", "GiB", GiB, {}],
    ["power", "W", 1, {}], ["temperature", "°C", 1, {}]];

  function renderFacts() {
    const set = (k, v) => { document.querySelector('[data-fact="' + k + '"]').textContent = v; };
    const pair = (used, total) => (total ? gpus.bytes(used) + " / " + gpus.bytes(total) : "–");
    set("node_id", node.node_id);
    set("node_ip", node.node_ip || "–");
    set("state", node.state + (node.state_message ? ": " + node.state_message : ""));
    set("role", node.is_head ? "head" : "worker");
    set("cpu_percent", node.cpu_percent === null ? "–" : node.cpu_percent.toFixed(0) + "%");
    set("memory", pair(node.mem_used_bytes, node.mem_total_bytes));
    set("object_store", pair(node.object_store_used_bytes, node.object_store_total_bytes));
    set("spilled", node.object_store_spilled_bytes === null ? "–" : gpus.bytes(node.object_store_spilled_bytes) +
      (node.object_store_restored_bytes ? " (" + gpus.bytes(node.object_store_restored_bytes) + " restored)" : ""));
    const T = window.raywatch.time;
    set("since", node.state === "DEAD" && node.ended_at ? "dead since " + T.stamp(node.ended_at)
      : node.started_at ? T.stamp(node.started_at) : "–");
    document.querySelector('[data-fact="state"]').className = "node-" + node.state.toLowerCase();
    const body = document.querySelector("#resources tbody");
    for (const name of Object.keys(node.resources || {}).sort()) {
      const r = node.resources[name];
      const memoryLike = /memory/i.test(name);
      const fmt = (v) => (v === null || v === undefined ? "?" : memoryLike ? gpus.bytes(v) : String(+v.toFixed(2)));
      const tr = el("tr", { "data-resource": name });
      tr.append(el("th", {}, name), el("td", {}, fmt(r.used)), el("td", {}, fmt(r.total)));
      body.append(tr);
    }
  }

  const grid = new gpus.TileGrid(document.getElementById("node-gpus"), {
    onFlush: (g) => {
      const c = g.counts();
      document.getElementById("gpu-empty").hidden = c.total > 0;
      document.getElementById("node-history").hidden = c.total === 0;
      document.getElementById("simulated-banner").hidden = !c.simulated;
    },
  });

  function nodeGpus() {
    return [...grid.tiles.values()].map((t) => t.gpu).sort((a, b) => a.index - b.index);
  }

  async function load(query, signal) {
    const list = nodeGpus();
    const data = await Promise.all(list.map((g) => H.fetchSamples(g.uuid, query, signal)));
    return data.map((d, i) => ({ ...d, gpu: list[i] }));
  }

  function render(data, range) {
    return Promise.all(charts.map((chart, i) => {
      const [key, unit, scale, yaxis] = METRICS[i];
      const traces = data.map((d) => ({
        name: "GPU " + d.gpu.index, type: "scatter", mode: "lines", line: { width: 1.5 },
        x: d.series.t.map((t) => H.axisTime(Date.parse(t))),
        y: d.series[key].map((v) => (v === null ? null : v / scale)),
      }));
      const layout = H.layout(unit, range, yaxis);
      layout.showlegend = true;
      layout.margin.t = 28; // room for the legend above the plot
      return Plotly.react(chart, traces, layout, H.CONFIG).then(() => {
        chart.dataset.traces = String(traces.length);
        chart.dataset.bucketS = data.length ? String(data[0].bucket_s) : "";
      });
    }));
  }

  renderFacts();
  grid.apply(JSON.parse(document.getElementById("gpus-initial").textContent), true);
  grid.flush();
  const view = new H.HistoryView({
    bar: document.getElementById("range-bar"), charts, status: document.getElementById("history-status"),
    initial: "1h", load, render,
  });
  setInterval(() => {
    const bucket = Number(charts[0].dataset.bucketS || 0) * 1000;
    const due = Date.now() - (view.loadedAt || 0) >= Math.max(REFRESH_MS, bucket);
    if (view.live && !view.loading && due && grid.tiles.size) view.refresh();
  }, REFRESH_MS);
  window.raywatch.connect("/ws/gpus/", {
    gpus: (data) => grid.apply((data.gpus || []).filter((g) => g.node_ip === node.node_ip), data.complete),
  });
})();
