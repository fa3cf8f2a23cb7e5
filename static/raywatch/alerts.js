// Alerts page and incident page: both read the alerts API and re-read it whenever the
// server pushes an incident change, so what they show is always the database's state.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const T = window.raywatch.time;
  const TERMINABLE = ["trial_stalled", "trial_process_gone"]; // the incident page offers the cure
  const LIST_PAGE = 100; // rows a page: firing first, then the newest resolved
  let listPage = 1, listPages = 1;

  function csrf() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }
  function where(i) {
    const parts = [];
    // With several clusters, which one first: an experiment name or address may repeat.
    if (document.body.dataset.manyClusters && i.cluster) parts.push("cluster " + i.cluster);
    if (i.experiment) parts.push("experiment " + i.experiment);
    if (i.trial_id) parts.push("trial " + i.trial_id);
    if (i.node_ip) parts.push("node " + i.node_ip);
    return parts.join(" · ") || i.subject;
  }
  function stateOf(i) {
    if (i.state === "resolved") return "resolved";
    if (i.silenced_by) return "silenced";
    if (i.acknowledged_at) return "acknowledged";
    return "firing";
  }

  async function ack(id, note) {
    const reply = await fetch("/api/alerts/" + id + "/ack", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify({ note: note || "" }),
    });
    if (!reply.ok) {
      let detail = reply.statusText;
      try { detail = (await reply.json()).detail || detail; } catch (e) { /* not JSON */ }
      window.alert("Could not acknowledge: " + detail);
    }
  }

  function actions(i, canAct, withNote) {
    const box = el("span", { class: "actions" });
    if (!canAct || i.state !== "firing") return box;
    if (!i.acknowledged_at) {
      const note = withNote ? el("input", { type: "text", placeholder: "note (optional)",
                                            class: "ack-note" }) : null;
      const button = el("button", { type: "button", class: "ack", "data-ack": i.id }, "Acknowledge");
      button.addEventListener("click", function () {
        button.disabled = true;
        ack(i.id, note ? note.value : "").then(refresh);
      });
      if (note) box.append(note);
      box.append(button);
    }
    if (withNote && i.trial_pk && TERMINABLE.includes(i.kind)) {
      box.append(el("button", { type: "button", class: "danger", id: "terminate-trial",
                                "data-terminate-trial": i.trial_pk }, "Terminate trial…"), " ");
    }
    const q = new URLSearchParams({ kind: i.kind, subject: i.subject });
    box.append(" ", el("a", { href: "/alerts/silences/?" + q, class: "silence" }, "Silence…"));
    return box;
  }

  // --- the alerts page -------------------------------------------------------------
  function alertRow(i, canAct) {
    const tr = el("tr", { "data-incident": i.id, class: "incident state-" + stateOf(i) });
    tr.append(el("td", { class: "state" }, stateOf(i)),
      el("td", { class: "sev sev-" + i.severity }, i.severity), el("td", { class: "kind" }, i.kind));
    const what = el("td", { class: "what" });
    what.append(el("a", { href: "/incidents/" + i.id + "/" }, i.summary));
    if (i.acknowledged_by) {
      what.append(el("div", { class: "muted" },
        "acknowledged by " + i.acknowledged_by + (i.ack_note ? ": " + i.ack_note : "")));
    }
    if (i.nobody_told) what.append(el("div", { class: "nobody-told" }, i.nobody_told));
    tr.append(what, el("td", { class: "where" }, where(i)));
    const since = el("td", { class: "since" });
    if (i.state === "resolved") since.append("resolved ", T.el(i.resolved_at));
    else since.append(T.el(i.opened_at));
    tr.append(since);
    const td = el("td", { class: "actions" });
    td.append(actions(i, canAct, false));
    tr.append(td);
    return tr;
  }

  let listRows = null; // the list's rows (live.js keyedRows), made at the first render

  function renderList(incidents, total, page) {
    const table = document.getElementById("alerts");
    const canAct = table.dataset.canAct === "1";
    listRows = listRows || window.raywatch.keyedRows(table.tBodies[0], (i) => alertRow(i, canAct));
    listRows(incidents, (i) => i.id, (i) => JSON.stringify(i));
    document.getElementById("no-alerts").hidden = incidents.length > 0;
    const n = (v) => Number(v).toLocaleString("en-US");
    listPages = Math.max(1, Math.ceil(total / LIST_PAGE));
    const from = (page - 1) * LIST_PAGE + 1;
    const firing = incidents.filter((i) => i.state === "firing").length;
    document.getElementById("alert-total").textContent = !incidents.length ? "none"
      : listPages > 1 ? n(from) + "–" + n(from + incidents.length - 1) + " of " + n(total)
        : firing + " firing, " + (incidents.length - firing) + " resolved";
    document.getElementById("alerts-pager").hidden = listPages <= 1;
    document.getElementById("alerts-page-of").textContent = "page " + n(listPage) + " of " + n(listPages);
    document.getElementById("alerts-prev").disabled = listPage <= 1;
    document.getElementById("alerts-next").disabled = listPage >= listPages;
  }

  // --- the incident page -----------------------------------------------------------
  function renderIncident(i) {
    const box = document.getElementById("incident");
    document.getElementById("incident-summary").textContent = i.summary;
    const facts = [["State", stateOf(i)], ["Severity", i.severity], ["Where", where(i)],
      ["Subject", i.subject], ["Opened", T.el(i.opened_at)]];
    if (i.resolved_at) facts.push(["Resolved", T.el(i.resolved_at)]);
    if (i.acknowledged_at) {
      facts.push(["Acknowledged", [T.el(i.acknowledged_at), " by " + i.acknowledged_by +
        (i.ack_note ? ": " + i.ack_note : "")]]);
    }
    if (i.silenced_by) facts.push(["Silenced", "by silence #" + i.silenced_by]);
    if (i.nobody_told) facts.push(["Told", el("span", { class: "nobody-told" }, i.nobody_told)]);
    const details = i.details || {};
    if (details.activity) {
      facts.push(["Activity", details.activity +
        (details.activity_unknown ? ": " + details.activity_unknown : "")]);
    }
    const dl = document.getElementById("incident-facts");
    dl.replaceChildren();
    for (const [k, v] of facts) {
      const dd = el("dd", { "data-fact": k });
      dd.append(...[].concat(v));
      dl.append(el("dt", {}, k), dd);
    }
    if (i.trial_pk) {
      dl.append(el("dt", {}, "Trial"));
      const dd = el("dd", {});
      dd.append(el("a", { href: "/trials/" + i.trial_pk + "/" }, i.trial_id));
      dl.append(dd);
    }
    const stackSection = document.getElementById("incident-stack-section");
    stackSection.hidden = !("stack" in details);
    if ("stack" in details) window.raywatch.renderStack(document.getElementById("incident-stack"), details.stack);
    document.getElementById("incident-actions").replaceChildren(
      actions(i, box.dataset.canAct === "1", true));
    const list = document.getElementById("timeline");
    list.replaceChildren(...i.timeline.map(function (e) {
      const li = el("li", { class: "event event-" + e.kind, "data-kind": e.kind });
      li.append(T.el(e.at, { ago: false }), " ", el("b", {}, e.kind.replace("_", " ")));
      if (e.actor) li.append(" by " + e.actor);
      if (e.text) li.append(": ", el("span", {}, e.text));
      if (e.outcome) li.append(el("div", { class: "outcome" }, e.outcome));
      return li;
    }));
  }

  const listTable = document.getElementById("alerts");
  const incidentBox = document.getElementById("incident");
  let pending = null;
  let asked = 0;  // reads asked for: only the newest one's answer is shown

  async function refresh() {
    const mine = ++asked;
    const page = listPage;
    let url;
    if (listTable) {
      const params = new URLSearchParams(new FormData(document.getElementById("alert-filters")));
      for (const [k, v] of [...params]) if (!v) params.delete(k);
      params.set("page_size", LIST_PAGE);
      if (page > 1) params.set("page", page);
      url = "/api/alerts/?" + params;
    } else {
      url = "/api/alerts/" + incidentBox.dataset.id + "/";
    }
    const reply = await fetch(url, { credentials: "same-origin" });
    // A read asked for since (the next page clicked while a push's read was on its way)
    // answers for itself: an older answer arriving last must not show the wrong page.
    if (mine !== asked) return;
    if (listTable && reply.status === 404 && page > 1) {  // fewer pages now: the last
      listPage = 1;
      refresh();
      return;
    }
    if (!reply.ok) return;
    const data = await reply.json();
    if (mine !== asked) return;
    if (listTable) renderList(data, Number(reply.headers.get("X-Total-Count") || data.length), page);
    else renderIncident(data);
  }
  // Bursts of pushes (200 incidents opening) become one re-read.
  function soon() {
    if (pending) return;
    pending = setTimeout(function () { pending = null; refresh(); }, 250);
  }

  if (listTable) {
    document.getElementById("alerts-prev").addEventListener("click", () => { listPage = Math.max(1, listPage - 1); refresh(); });
    document.getElementById("alerts-next").addEventListener("click", () => { listPage = Math.min(listPages, listPage + 1); refresh(); });
  }
  if (listTable || incidentBox) {
    refresh();
    window.raywatch.connect("/ws/alerts/", {
      alerts: soon, incidents_changed: soon, deliveries: soon,
    });
  }
})();
