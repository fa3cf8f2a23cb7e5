(function () {
  "use strict";
  const el = window.raywatch.el;
  function render(experiments) {
    const body = document.querySelector("#experiments tbody");
    body.replaceChildren();
    document.getElementById("empty").hidden = experiments.length > 0;
    for (const e of experiments) {
      const tr = el("tr", { "data-experiment": e.name });
      const link = el("a", { href: "/experiments/" + e.id + "/" }, e.name);
      const name = el("td"); name.append(link);
      const statuses = Object.entries(e.by_status).map(([s, n]) => s + " " + n).join(", ");
      tr.append(name, el("td", {}, e.kind), el("td", {}, e.trials), el("td", {}, statuses),
        el("td", { class: e.firing ? "bad" : "" }, e.firing),
        el("td", {}, new Date(e.updated_at).toLocaleString()));
      body.append(tr);
    }
  }
  render(JSON.parse(document.getElementById("experiments-initial").textContent));
  window.raywatch.connect("/ws/experiments/", { experiments: render });
})();
