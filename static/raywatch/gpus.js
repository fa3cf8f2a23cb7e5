// The GPU wall: every GPU in the cluster as a tile, grouped by node, coloured by
// state, updated in place from /ws/gpus/ pushes (one node's tiles per push).
(function () {
  "use strict";
  const el = window.raywatch.el;
  const gpus = window.raywatch.gpus;
  const filter = document.getElementById("gpu-filter");
  const chosen = new Set(); // states to show; none chosen: all
  const chips = new Map();

  const grid = new gpus.TileGrid(document.getElementById("gpu-wall"), { grouped: true, onFlush: summarise });

  function matches(t) {
    if (chosen.size && !chosen.has(t.state)) return false;
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    return words.every((w) => t.search.includes(w));
  }

  function buildLegend() {
    const box = document.getElementById("state-counts");
    for (const [state, help] of gpus.STATES) {
      const chip = el("button", {
        type: "button", class: "state-chip state-" + state, "data-state-count": state,
        title: state + ": " + help, "aria-pressed": "false",
      });
      const count = el("b", {}, "0");
      chip.append(el("i", { class: "swatch" }), " " + state + " ", count);
      chip.addEventListener("click", () => {
        chosen.has(state) ? chosen.delete(state) : chosen.add(state);
        chip.setAttribute("aria-pressed", String(chosen.has(state)));
        refilter();
      });
      box.append(chip);
      chips.set(state, count);
    }
  }

  function summarise() {
    const c = grid.counts();
    for (const [state, count] of chips) gpus.setText(count, String(c.states[state] || 0));
    const filtered = c.shown !== c.total ? " · " + c.shown + " shown" : "";
    gpus.setText(document.getElementById("gpu-count"),
      c.total + " GPU" + (c.total === 1 ? "" : "s") + " on " + grid.groups.size + " node" + (grid.groups.size === 1 ? "" : "s") + filtered);
    document.getElementById("simulated-banner").hidden = !c.simulated;
    document.getElementById("gpu-empty").hidden = c.total > 0;
  }

  function refilter() {
    grid.setFilter(matches);
    summarise();
  }

  buildLegend();
  grid.match = matches;
  filter.addEventListener("input", refilter);
  grid.apply(JSON.parse(document.getElementById("gpus-initial").textContent), true);
  grid.flush(); // draw the page's own data at once, not a frame later
  window.raywatch.connect("/ws/gpus/", { gpus: (data) => grid.apply(data.gpus, data.complete) });
})();
