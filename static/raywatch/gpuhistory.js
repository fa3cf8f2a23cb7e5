// GPU history charts, shared by the GPU page and the node page: the range buttons,
// the time window (a live "last 6 h" that follows now, or a range the user zoomed
// to), fetching /api/gpus/<uuid>/samples/ with about one point per pixel, and
// refetching a zoomed range from the server so that zooming in shows detail.
(function () {
  "use strict";
  const el = window.raywatch.el;

  const RANGES = [["15m", "15 min", 900], ["1h", "1 h", 3600], ["6h", "6 h", 21600],
    ["24h", "24 h", 86400], ["7d", "7 d", 604800]];
  const MAX_POINTS = 2000;
  const ZOOM_DEBOUNCE_MS = 300;
  const CONFIG = window.raywatch.charts.CONFIG;

  // Plotly shows date strings as written: give it the wall-clock time of the pages' zone.
  const axisTime = window.raywatch.time.axis;
  const parseAxis = window.raywatch.time.fromAxis;

  function layout(unit, range, extra) {
    return window.raywatch.charts.layout({
      height: 220, margin: { t: 10, r: 10, b: 30, l: 55 }, showlegend: false, hovermode: "x unified",
      x: { type: "date", range: range.map(axisTime), title: window.raywatch.time.axisTitle },
      y: { unit: unit, rangemode: "tozero", ...(extra || {}) },
    });
  }

  // Plotly reports its own relayouts too; those made by this page are not zooms.
  let muted = 0;
  function quietly(promise) {
    muted++;
    return Promise.resolve(promise).finally(() => { muted--; });
  }

  function zoomRange(ev) {
    if (ev["xaxis.autorange"]) return "reset";
    const range = ev["xaxis.range"] || (ev["xaxis.range[0]"] !== undefined && [ev["xaxis.range[0]"], ev["xaxis.range[1]"]]);
    return range ? range.map(parseAxis) : null;
  }

  async function fetchSamples(uuid, query, signal) {
    const url = "/api/gpus/" + encodeURIComponent(uuid) + "/samples/?" + new URLSearchParams(query);
    const response = await fetch(url, { signal, credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error("GPU history: HTTP " + response.status);
    return response.json();
  }

  // The window of a page's charts. `load(query, signal)` fetches; `render(data, range)`
  // draws what it fetched. Only the latest request is drawn.
  class HistoryView {
    constructor({ bar, charts, status, initial, load, render }) {
      this.charts = charts;
      this.status = status;
      this.load = load;
      this.render = render;
      this.seq = 0;
      this.controller = null;
      this.timer = 0;
      this.buttons = RANGES.map(([key, label, span]) => {
        const b = el("button", { type: "button", "data-range": key, title: "the last " + label }, label);
        b.addEventListener("click", () => this.pick(key, span));
        return b;
      });
      bar.replaceChildren(...this.buttons);
      const [key, , span] = RANGES.find((r) => r[0] === initial) || RANGES[1];
      this.pick(key, span);
    }

    get live() { return this.key !== null; }

    range() {
      return this.live ? [Date.now() - this.span * 1000, Date.now()] : [this.since, this.until];
    }

    points() {
      const width = Math.max(...this.charts.map((c) => c.clientWidth || 0));
      return Math.max(50, Math.min(MAX_POINTS, Math.round(width) || 1000));
    }

    query() {
      if (this.live) return { since: "-" + this.key, points: this.points() };
      return { since: (this.since / 1000).toFixed(3), until: (this.until / 1000).toFixed(3), points: this.points() };
    }

    pick(key, span) {
      this.key = key;
      this.span = span;
      this.mark();
      return this.refresh();
    }

    zoom(range) {
      if (range === "reset") return this.live ? this.refresh() : this.pick(this.lastKey, this.lastSpan);
      if (this.live) { this.lastKey = this.key; this.lastSpan = this.span; }
      this.key = null;
      [this.since, this.until] = range;
      this.span = (this.until - this.since) / 1000;
      this.mark();
      return this.refresh();
    }

    mark() {
      for (const b of this.buttons) b.classList.toggle("current", b.dataset.range === this.key);
      for (const c of this.charts) c.dataset.live = String(this.live);
    }

    // Plotly gives a chart its .on() when it first draws it: called after each render.
    listen(chart) {
      if (chart.dataset.zoomable || !chart.on) return;
      chart.dataset.zoomable = "true";
      chart.on("plotly_relayout", (ev) => {
        const range = muted ? null : zoomRange(ev);
        if (!range) return;
        clearTimeout(this.timer);
        this.timer = setTimeout(() => this.zoom(range), ZOOM_DEBOUNCE_MS);
      });
    }

    async refresh() {
      const mine = ++this.seq;
      if (this.controller) this.controller.abort();
      this.controller = new AbortController();
      const started = performance.now();
      this.loading = true;
      this.say("loading…");
      let data;
      try {
        data = await this.load(this.query(), this.controller.signal);
      } catch (err) {
        if (mine === this.seq && err.name !== "AbortError") {
          this.loading = false;
          this.say(String(err.message || err), true);
        }
        return;
      }
      if (mine !== this.seq) return;
      await quietly(this.render(data, this.range()));
      this.loading = false;
      this.loadedAt = Date.now();
      for (const chart of this.charts) this.listen(chart);
      const ms = Math.round(performance.now() - started);
      for (const chart of this.charts) chart.dataset.loadMs = String(ms);
      this.say(this.describe(data) + " · " + ms + " ms");
    }

    describe(data) {
      const one = Array.isArray(data) ? data[0] : data;
      if (!one) return "no GPUs";
      const each = one.bucket_s <= 1 ? "every reading" : "one point per " + window.raywatch.gpus.duration(one.bucket_s);
      return (this.live ? "live, " : "zoomed, ") + each + " (" + (one.source === "rollup" ? "minute rollups" : "raw readings") + ")";
    }

    say(text, bad) {
      if (!this.status) return;
      this.status.textContent = text;
      this.status.classList.toggle("error", !!bad);
    }
  }

  window.raywatch.history = { RANGES, CONFIG, axisTime, parseAxis, layout, quietly, fetchSamples, HistoryView };
})();
