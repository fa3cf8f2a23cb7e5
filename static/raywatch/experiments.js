(function () {
  "use strict";
  const el = window.raywatch.el;
  const kit = window.raywatch.trials;
  function render(experiments) {
    const body = document.querySelector("#experiments tbody");
    body.replaceChildren();
    document.getElementById("empty").hidden = experiments.length > 0;
    for (const e of experiments) {
      const tr = el("tr", { "data-experiment": e.name });
      const link = el("a", { href: "/experiments/" + e.id + "/" }, e.name);
      const name = el("td");
      // With several clusters (and none chosen in the header), whose experiment it is.
      if (document.body.dataset.manyClusters && !document.body.dataset.cluster) {
        name.append(el("span", { class: "cluster-tag" }, e.cluster), " ");
      }
      name.append(link);
      const statuses = Object.entries(e.by_status).map(([s, n]) => s + " " + n).join(", ");
      const objective = e.metric ? e.metric + (e.mode ? " " + kit.arrow(e.mode) : "") : "–";
      // What wrote its runs' files (verl, easyr1, openrlhf, tune, tensorboard, raytrain).
      const framework = el("td", { class: "framework" }, e.frameworks.length ? e.frameworks.join(", ") : e.kind);
      tr.append(name, framework, el("td", {}, objective), el("td", {}, e.trials),
        el("td", {}, statuses), el("td", { class: e.firing ? "bad" : "" }, e.firing),
        el("td", { class: "updated", "data-at": e.updated_at, title: kit.utc(e.updated_at) }, kit.when(e.updated_at)));
      body.append(tr);
    }
  }
  const initial = JSON.parse(document.getElementById("experiments-initial").textContent);
  kit.syncClock(initial.server_now);
  render(initial.experiments);
  setInterval(() => {
    for (const cell of document.querySelectorAll("#experiments td.updated")) cell.textContent = kit.when(cell.dataset.at);
  }, 5000);
  window.raywatch.connect("/ws/experiments/", { experiments: render });
})();
