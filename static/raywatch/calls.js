// Ray calls running now, as the Jobs page and an RL run's page list them: each row's
// clock ticks here, and a call past its usual duration's limit reads overdue.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const time = window.raywatch.time;

  // withJob: a Job column (the Jobs page lists every job's calls; a run's page, its own).
  function row(c, withJob) {
    const tr = el("tr", { "data-call": c.task_id, "data-since": c.since });
    const name = el("td", { class: "call" });
    if (document.body.dataset.manyClusters && !document.body.dataset.cluster) {
      name.append(el("span", { class: "cluster-tag" }, c.cluster), " ");
    }
    name.append(el("code", { title: c.kind + " " + c.task_id }, c.name));
    const actor = el("td", {}, c.actor || (c.actor_id ? c.actor_id.slice(0, 8) : "–"));
    if (c.trial) {  // a Tune trial's (or a run's trainer's) own call
      actor.append(" · ", el("a", { href: "/trials/" + c.trial.id + "/" }, "trial " + c.trial.trial_id));
    }
    tr.append(name, actor);
    if (withJob) tr.append(el("td", {}, c.job_id || "–"));
    tr.append(el("td", {}, (c.pid ? "pid " + c.pid + " on " : "") + (c.node_ip || "?")),
      el("td", { class: "running" }), el("td", {}, c.usual_s === null ? "not known yet" : time.duration(c.usual_s)));
    tr.dataset.limit = c.overdue_after_s === null ? "" : c.overdue_after_s;
    tick(tr);
    return tr;
  }

  function tick(tr) {
    const ran = (Date.now() - new Date(tr.dataset.since).getTime()) / 1000;
    const cell = tr.querySelector("td.running");
    cell.textContent = time.duration(ran);
    const over = tr.dataset.limit !== "" && ran >= Number(tr.dataset.limit);
    cell.classList.toggle("bad", over);
    cell.title = over ? "past " + time.duration(Number(tr.dataset.limit)) + ": overdue" : "";
  }

  // Fill `table`'s body with `calls` and show `empty` when there are none; the rows' clocks
  // tick every second from the first call on.
  function render(table, empty, calls, withJob) {
    table.querySelector("tbody").replaceChildren(...calls.map((c) => row(c, withJob)));
    empty.hidden = calls.length > 0;
    if (!table.dataset.ticking) {
      table.dataset.ticking = "1";
      setInterval(() => table.querySelectorAll("tbody tr").forEach(tick), 1000);
    }
  }

  window.raywatch.calls = { render };
})();
