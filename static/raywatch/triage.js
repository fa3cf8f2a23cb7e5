// The home page: what needs an operator now. Rendered from /api/triage/'s payload: the
// socket's snapshot on (re)connect, then fetched again (at most every REFETCH_MS) when
// the cluster, demand, GPUs, trials or incidents change.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const REFETCH_MS = 2000;

  const duration = (s) => (s === null || s === undefined ? "–" : window.raywatch.time.age(s));

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const gib = n / 2 ** 30;
    return gib >= 1 ? gib.toFixed(1) + " GiB" : Math.round(n / 2 ** 20) + " MiB";
  }

  function link(href, text, cls) {
    const a = el("a", { href: href }, text);
    if (cls) a.className = cls;
    return a;
  }

  function fill(section, rows, makeRow) {
    const block = document.getElementById(section);
    const body = block.querySelector("tbody");
    body.replaceChildren(...rows.map(makeRow));
    block.querySelector("table").hidden = rows.length === 0;
    const empty = block.querySelector(".empty");
    if (empty) empty.hidden = rows.length !== 0;
  }

  function card(name, text, bad) {
    const c = document.querySelector('#triage-cards [data-card="' + name + '"]');
    c.querySelector("p").textContent = text;
    c.classList.toggle("bad", Boolean(bad));
  }

  function incidentRow(i) {
    const tr = el("tr", { "data-incident": String(i.id), class: "sev-row-" + i.severity });
    tr.append(el("td", { class: "sev-" + i.severity }, i.severity));
    const what = el("td", { class: "summary" });
    what.append(link(i.url, i.summary), el("div", { class: "muted" }, i.kind));
    tr.append(what);
    tr.append(el("td", { class: "where" }, i.experiment || i.node_ip || i.subject));
    tr.append(el("td", {}, duration(i.age_s)));
    tr.append(el("td", {}, i.silenced ? "silenced" : i.acknowledged ? "acknowledged" : "open"));
    return tr;
  }

  function trialRow(t) {
    const tr = el("tr", { "data-trial": t.trial_id });
    const who = el("td", {});
    who.append(link(t.url, t.trial_id, "mono"), el("div", { class: "muted" }, t.experiment));
    tr.append(who);
    const what = el("td", { class: "summary" });
    what.append(el("b", { class: "bad" }, t.problems.join(", ")), el("div", { class: "muted" }, t.summary));
    tr.append(what);
    tr.append(el("td", {}, duration(t.since_s)));
    tr.append(el("td", {}, duration(t.silent_s)));
    tr.append(el("td", { class: "mono" }, t.node_ip || "–"));
    const act = el("td", { class: "act" });
    act.append(link(t.url, t.status === "RUNNING" ? "Open to terminate" : "Open"),
               " · ", link(t.incident_url, "incident"));
    tr.append(act);
    return tr;
  }

  function demandRow(d) {
    const tr = el("tr", { class: d.infeasible ? "infeasible" : "" });
    const what = el("td", { title: d.key });
    what.append(el("span", {}, d.name), el("div", { class: "muted" }, d.kind + (d.count > 1 ? " ×" + d.count : "")));
    tr.append(what);
    tr.append(el("td", { class: "mono" }, d.bundles.map(b => Object.entries(b).map(([k, v]) => k + ":" + v).join(" ")).join(" | ")));
    tr.append(el("td", {}, duration(d.waiting_s)));
    tr.append(el("td", { class: "summary" + (d.infeasible ? " bad" : "") },
                 (d.infeasible ? "no node can ever fit it. " : "") + (d.explanation || "")));
    return tr;
  }

  function gpuRow(g) {
    const tr = el("tr", { "data-gpu": g.uuid });
    const who = el("td", {});
    who.append(link(g.url, g.node + " GPU " + g.index));
    if (g.simulated) who.append(" ", el("span", { class: "badge simulated" }, "SIMULATED"));
    tr.append(who);
    tr.append(el("td", { class: "state-" + g.state }, g.state));
    tr.append(el("td", {}, g.utilization === null ? "–" : Math.round(g.utilization) + " %"));
    tr.append(el("td", {}, bytes(g.memory_used)));
    tr.append(el("td", { class: "summary" }, g.owner || "–"));
    return tr;
  }

  function sourceRow(s) {
    const tr = el("tr", { class: "state-" + s.state });
    tr.append(el("td", {}, s.label), el("td", { class: "src-" + s.state }, s.state),
              el("td", { class: "summary" }, s.reason || ""));
    return tr;
  }

  function render(t) {
    document.getElementById("triage-as-of").textContent =
      "as of " + window.raywatch.time.abs(t.at, { date: false });
    document.getElementById("triage-simulated").hidden = !t.simulated;
    const sev = t.incidents.by_severity;
    card("incidents", t.incidents.total === 0 ? "none" :
      Object.entries(sev).filter(([, n]) => n).map(([s, n]) => n + " " + s).join(", "),
      sev.critical > 0);
    card("trials", String(t.trials.length), t.trials.length > 0);
    const infeasible = t.demands.rows.filter(d => d.infeasible).length;
    card("demands", window.raywatch.counted([[infeasible, "infeasible"],
      [t.demands.rows.length - infeasible, "waiting"], [t.demands.queued, "queued in a search"]])
      || "none", infeasible > 0);
    const states = t.gpus.states;
    card("gpus", t.gpus.total === 0 ? "none reported" :
      (states.busy || 0) + " busy of " + t.gpus.total +
      (t.gpus.idle_during_step ? ", " + t.gpus.idle_during_step + " idle in a step" : ""),
      t.gpus.attention.some(g => g.state === "orphan" || g.state === "hardware"));
    const down = t.sources.filter(s => s.state !== "healthy");
    card("sources", down.length ? down.length + " not healthy" : "all healthy", down.some(s => s.state === "down"));

    fill("firing", t.incidents.rows, incidentRow);
    fill("trials", t.trials, trialRow);
    fill("demands", t.demands.rows, demandRow);
    fill("gpus", t.gpus.attention, gpuRow);
    const counts = document.getElementById("gpu-states");
    counts.replaceChildren(...Object.entries(states).sort().map(([s, n]) => {
      const chip = el("a", { class: "state-chip state-" + s, href: t.gpus.url + "?state=" + s });
      chip.append(el("span", { class: "swatch" }), s + " " + n);
      return chip;
    }));
    fill("sources", t.sources, sourceRow);
  }

  let pending = null;
  let last = 0;
  function refetch() {
    if (pending) return;
    const wait = Math.max(0, last + REFETCH_MS - Date.now());
    pending = setTimeout(function () {
      const cluster = document.body.dataset.cluster;  // the header's switcher
      fetch("/api/triage/" + (cluster ? "?cluster=" + encodeURIComponent(cluster) : ""), { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(r => (r.ok ? r.json() : null))
        .then(t => { if (t) render(t); })
        .catch(() => {})
        .finally(() => { pending = null; last = Date.now(); });
    }, wait);
  }

  render(JSON.parse(document.getElementById("triage-initial").textContent));
  const changed = function () { refetch(); };
  window.raywatch.connect("/ws/triage/", {
    triage: render, cluster: changed, demands: changed, gpus: changed, experiments: changed,
    alerts: changed, health: changed,
  });
})();
