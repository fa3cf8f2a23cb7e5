// The Jobs page, live: rendered from the jobs payload (the page's initial copy, then the
// socket's snapshot and pushes whenever Ray's job list changes). raywatch's own driver
// (the one that keeps `make run`'s local cluster up) is left out and counted.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const time = window.raywatch.time;
  const table = document.getElementById("jobs");
  const canAct = table.dataset.canAct === "1";

  function row(j) {
    const tr = el("tr", { "data-job": j.key, "data-status": j.status });
    const id = el("td", { class: "id" });
    if (document.body.dataset.manyClusters && !document.body.dataset.cluster) {
      id.append(el("span", { class: "cluster-tag" }, j.cluster), " ");
    }
    id.append(el("code", { title: j.id }, j.id));
    tr.append(id, el("td", {}, j.type), el("td", { class: "status" }, j.status));
    const entry = el("td", { class: "entrypoint" });
    entry.append(el("code", { title: j.entrypoint }, j.entrypoint.length > 120 ? j.entrypoint.slice(0, 119) + "…" : j.entrypoint));
    if (j.message) entry.append(el("div", { class: "muted" }, j.message.slice(0, 200)));
    tr.append(entry);
    tr.append(el("td", {}, j.driver_pid ? "pid " + j.driver_pid + " on " + j.driver_node_ip : ""));
    const started = el("td", {});
    if (j.start_time) started.append(time.stamp(j.start_time));
    tr.append(started);
    const actions = el("td", { class: "actions" });
    if (canAct && j.submission_id && (j.status === "PENDING" || j.status === "RUNNING")) {
      actions.append(el("button", { type: "button", class: "danger", "data-stop-job": j.submission_id }, "Stop…"));
    }
    tr.append(actions);
    return tr;
  }

  // Pushes come with every change of a job's calls too: a job's row (its Stop… button)
  // stays the same element unless the job changed.
  const jobRows = window.raywatch.keyedRows(table.querySelector("tbody"), row);

  function render(data) {
    window.raywatch.calls.render(document.getElementById("calls"),
      document.getElementById("calls-empty"), data.calls || [], true);
    jobRows(data.jobs, (j) => j.key, (j) => JSON.stringify(j));
    document.getElementById("jobs-empty").hidden = data.jobs.length > 0;
    const internal = document.getElementById("jobs-internal");
    internal.hidden = !data.internal_hidden;
    internal.textContent = data.internal_hidden === 1
      ? "Not listed: raywatch's own driver, which keeps make run's local Ray cluster up."
      : "Not listed: " + data.internal_hidden + " drivers of raywatch's own local Ray cluster.";
  }

  render(JSON.parse(document.getElementById("jobs-initial").textContent));
  window.raywatch.connect("/ws/jobs/", { jobs: render });
})();
