// Actions: the confirm dialog (what will be ended, and why) and the live progress of
// an action (requested -> signalled -> succeeded or failed, each step as it happens).
// Buttons: <button data-terminate-trial="TRIAL_PK">, <button data-kill-process="UUID/PID">,
// <button data-stop-job="SUBMISSION_ID">.
(function () {
  "use strict";
  const el = window.raywatch.el;
  const dialog = document.getElementById("action-dialog");
  if (!dialog) return;
  let pending = null; // {url, expected}
  let following = null;

  function csrf() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }
  function bytes(n) {
    return n === null || n === undefined ? "?" : (n / 1024 ** 3).toFixed(1) + " GiB";
  }
  function duration(s) {
    return s === null || s === undefined ? "unknown" : window.raywatch.time.duration(s);
  }
  function showError(text) {
    const p = document.getElementById("action-error");
    p.textContent = text;
    p.hidden = !text;
  }

  function trialFacts(t) {
    const gpus = t.gpus.length
      ? t.gpus.map((g) => "GPU " + g.index + " (" + bytes(g.used_memory) + ")").join(", ")
      : "none seen";
    // The process as Ray knows it (never as a result line names it); when Ray does not
    // tie the trial to one, the preview is refused and the dialog says why instead.
    const actor = t.actor_id
      ? "Ray worker of actor " + (t.actor || "") + " " + t.actor_id.slice(0, 12) +
        (t.actor_since ? ", since " + window.raywatch.time.stamp(t.actor_since) : "")
      : "not listed by Ray";
    return [["Cluster", t.cluster], ["Trial", t.trial_id + " of " + t.experiment],
      ["Status", t.status], ["Process", "pid " + t.pid + ": " + actor],
      // One route per node: its agent (raywatch's own host's too), else Ray's GCS.
      ["Node", (t.hostname || "") + " " + t.node_ip + (t.agent_node ? " (its agent signals)" :
        " (no agent: through Ray's GCS)")], ["GPUs held", gpus],
      ["Silent for", duration(t.silent_s) + (t.iteration ? " (after step " + t.iteration + ")" : "")],
      ["Attempt", t.attempt]];
  }

  function processFacts(t) {
    return [["Process", "pid " + t.pid], ["GPU", "GPU " + t.gpu_index + " on " + t.node + " (" + t.node_ip + ")"],
      ["Memory held", bytes(t.used_memory)], ["Owner", t.owner_label + (t.owner_reason ? ": " + t.owner_reason : "")],
      ["Seen since", window.raywatch.time.stamp(t.first_seen_at)]];
  }

  function jobFacts(t) {
    return [["Job", t.submission_id || t.key], ["Status", t.status],
      ["Entrypoint", t.entrypoint], ["Driver", "pid " + t.driver_pid + " on " + t.driver_node_ip]];
  }

  // What each kind of button ends, and how the dialog describes it.
  const KINDS = {
    job: {
      url: (id) => "/api/jobs/" + encodeURIComponent(id) + "/stop",
      title: "Stop Ray job", confirm: "Stop", facts: jobFacts,
      expected: (t) => ({ status: t.status }),
      how: "Ray's Jobs API stops the job: its driver and every actor and task it started.",
    },
    trial: {
      url: (id) => "/api/trials/" + encodeURIComponent(id) + "/terminate",
      title: "Terminate trial", confirm: "Terminate", facts: trialFacts,
      expected: (t) => ({ pid: t.pid, attempt: t.attempt }),
      how: "SIGTERM first; if it still runs after the grace period, it is killed.",
    },
    process: {
      url: (id) => "/api/gpus/" + encodeURIComponent(id.split("/")[0]) + "/processes/" +
        encodeURIComponent(id.split("/")[1]) + "/kill",
      title: "Kill GPU process", confirm: "Kill", facts: processFacts, expected: () => ({}),
      how: "It belongs to no live Ray worker. SIGTERM first, SIGKILL after the grace period.",
    },
  };

  // The API's own words when it refuses: DRF's {"detail": ...}, a {"message": ...} or field
  // errors; when the reply is not JSON (a proxy's error page), its HTTP status.
  function errorText(reply, data) {
    if (data && typeof data === "object") {
      if (data.detail) return String(data.detail);
      if (data.message) return String(data.message);
      const fields = Object.entries(data).map(([k, v]) => k + ": " + [].concat(v).join(" "));
      if (fields.length) return fields.join("; ");
    }
    return "the server answered HTTP " + reply.status +
      (reply.statusText ? " " + reply.statusText : "") + (data === null ? " (not JSON)" : "");
  }

  // {ok, status, data, error}: error is the text to show a person, null when all went well.
  async function call(url, options) {
    let reply;
    try {
      reply = await fetch(url, Object.assign({ credentials: "same-origin" }, options));
    } catch (exc) {
      return { ok: false, status: 0, data: null,
               error: "raywatch could not be reached: " + exc.message };
    }
    let data = null;
    try { data = JSON.parse(await reply.text()); } catch (exc) { data = null; }
    const ok = reply.ok && data !== null;
    return { ok: ok, status: reply.status, data: data, error: ok ? null : errorText(reply, data) };
  }

  function describe(spec, target) {
    const dl = document.getElementById("action-target");
    dl.replaceChildren();
    for (const [k, v] of target ? spec.facts(target) : []) {
      dl.append(el("dt", {}, k), el("dd", { "data-fact": k }, v));
    }
    document.getElementById("action-title").textContent = spec.title;
    document.getElementById("action-confirm").textContent = spec.confirm;
    document.getElementById("action-how").textContent = target ? spec.how : "";
    document.getElementById("action-reason").value = "";
    // Nothing to end (the preview failed): the dialog only says why.
    for (const node of dialog.querySelectorAll("[data-needs-target]")) node.hidden = !target;
  }

  async function open(kind, id) {
    const spec = KINDS[kind];
    const url = spec.url(id);
    const preview = await call(url, {});
    if (preview.ok && preview.data.active_action) { follow(preview.data.active_action); return; }
    const target = preview.ok ? preview.data.target : null;
    describe(spec, target);
    showError(preview.error || "");
    pending = target ? { url: url, expected: spec.expected(target) } : null;
    document.getElementById("action-confirm").disabled = !pending;
    if (!dialog.open) dialog.showModal();
  }

  async function confirm(event) {
    event.preventDefault();
    if (!pending) return;
    const button = document.getElementById("action-confirm");
    button.disabled = true;
    try {
      const reply = await call(pending.url, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
        body: JSON.stringify({ reason: document.getElementById("action-reason").value,
                               expected: pending.expected }),
      });
      if (reply.status !== 202) {
        showError(reply.error || "unexpected reply: HTTP " + reply.status);
        return;
      }
      dialog.close();
      follow(reply.data.action_id);
    } finally {
      button.disabled = false;
    }
  }

  async function render(id) {
    const reply = await fetch("/api/actions/" + id + "/", { credentials: "same-origin" });
    if (!reply.ok) return null;
    const a = await reply.json();
    document.getElementById("action-progress").hidden = false;
    document.getElementById("action-id").textContent = a.id;
    const state = document.getElementById("action-state");
    state.textContent = a.state;
    state.dataset.state = a.state;
    document.getElementById("action-steps").replaceChildren(...a.steps.map(function (s) {
      const li = el("li", { "data-step": s.step });
      li.append(el("time", {}, s.at.slice(11, 19)), " ", el("b", {}, s.step));
      if (s.detail) li.append(": " + s.detail);
      return li;
    }));
    return a;
  }

  // Re-read on every push about this action, and every 2 s as a safety net.
  function follow(id) {
    following = id;
    render(id);
    let after = 0; // Tune's verdict comes as a step after the action ended
    const timer = setInterval(async function () {
      const a = await render(id);
      if (a && !["requested", "signalled"].includes(a.state) && ++after > 15) {
        clearInterval(timer);
      }
    }, 2000);
  }
  window.raywatch.onTopic("action", function (data) {
    if (following !== null && data.id === following) render(following);
  });

  document.getElementById("action-form").addEventListener("submit", confirm);
  document.getElementById("action-cancel").addEventListener("click", () => dialog.close());
  document.addEventListener("click", function (event) {
    const trial = event.target.closest("[data-terminate-trial]");
    if (trial) open("trial", trial.dataset.terminateTrial);
    const proc = event.target.closest("[data-kill-process]");
    if (proc) open("process", proc.dataset.killProcess);
    const job = event.target.closest("[data-stop-job]");
    if (job) open("job", job.dataset.stopJob);
  });
  window.raywatch.actions = { open: open, follow: follow };
})();
