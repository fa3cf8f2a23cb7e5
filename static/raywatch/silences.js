// The new-silence form: as its matchers change, ask the server which firing incidents
// the silence would mute (the same matching the silence will use) and list them.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const form = document.getElementById("silence-form");
  const summary = document.getElementById("preview-summary");
  const list = document.getElementById("preview-list");
  const MATCHERS = ["kind", "severity", "subject", "experiment", "node"];
  let timer = null;
  let seq = 0;

  function matchers() {
    const q = new URLSearchParams();
    for (const name of MATCHERS) q.set(name, (form.elements[name].value || "").trim());
    return q;
  }

  async function preview() {
    const q = matchers();
    const mine = ++seq;
    if (![...q.values()].some(Boolean)) {
      summary.textContent = "Choose a kind, a severity or another matcher to see which firing incidents this silence would mute.";
      list.replaceChildren();
      form.dataset.preview = "empty";
      return;
    }
    const reply = await fetch("/api/silences/preview?" + q, { credentials: "same-origin" });
    if (mine !== seq) return; // a later change asked again
    if (!reply.ok) {
      summary.textContent = "Could not preview: HTTP " + reply.status;
      return;
    }
    const data = await reply.json();
    form.dataset.preview = String(data.count);
    if (data.problems.length) {
      summary.textContent = data.problems.join("; ");
      summary.className = "error";
      list.replaceChildren();
      return;
    }
    summary.className = "muted";
    summary.textContent = data.count === 0 ? "No firing incident matches: it would mute only incidents that open later."
      : data.count + " firing incident" + (data.count === 1 ? "" : "s") + " match" + (data.count === 1 ? "es" : "") +
        (data.count > data.incidents.length ? " (the newest " + data.incidents.length + " below)" : "") + ":";
    list.replaceChildren(...data.incidents.map(function (i) {
      const li = el("li", { "data-incident": i.id });
      li.append(el("span", { class: "sev sev-" + i.severity }, i.severity), " ", el("code", {}, i.kind), " ");
      li.append(el("a", { href: "/incidents/" + i.id + "/" }, i.summary));
      if (i.silenced_by) li.append(el("span", { class: "muted" }, " (already silenced by #" + i.silenced_by + ")"));
      return li;
    }));
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(preview, 200);
  }
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  preview();
})();
