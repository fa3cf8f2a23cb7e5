// A stalled trial's or an overdue Ray call's Python stack (py-spy's dump), as the trial
// and incident pages show it: when it was taken and by which source, or why it could not
// be; and the verdict of its few stacks (hung, or slow and busy).
(function () {
  "use strict";
  const el = window.raywatch.el;

  const when = window.raywatch.time.stamp;

  function headline(s) {
    const where = "pid " + s.pid + " on " + (s.where || "its node");
    if (s.state === "pending") {
      return "Taking the stack of " + where + "… (asked by " + s.requested_by + " at " +
        when(s.requested_at) + ")";
    }
    if (s.state === "taken") {
      return "Taken " + when(s.taken_at) + " by " + s.source + " (" + where + ", asked by " +
        s.requested_by + ")";
    }
    return "No stack of " + where + " (asked by " + s.requested_by + " at " +
      when(s.requested_at) + "): ";
  }

  // How far a stack has got: asked for, then an outcome (taken, or why not). A stack with a
  // larger id was asked for later.
  const STAGE = { pending: 0, failed: 1, taken: 1 };

  // Whether `s` is older than what the box shows: the reply to "Take stack now" can reach
  // the page after the push of that stack's outcome, and must not put "taking" back.
  function older(box, s) {
    const shown = box.dataset.key ? JSON.parse(box.dataset.key) : null;
    if (!shown) return false;
    if (!s) return true; // a stack once shown stays (its trial's history)
    if (s.id !== shown.id) return s.id < shown.id;
    return STAGE[s.state] < STAGE[shown.state];
  }

  function renderStack(box, s) {
    const key = JSON.stringify(s || null);
    if (box.dataset.key === key) return; // unchanged: keep the reader's scroll position
    if (older(box, s)) return;
    box.dataset.key = key;
    box.replaceChildren();
    box.dataset.state = s ? s.state : "none";
    if (!s) {
      box.append(el("p", { class: "muted" }, "No stack taken yet."));
      return;
    }
    const head = el("p", { class: "stack-head" }, headline(s));
    if (s.state === "failed") head.append(el("span", { class: "error", "data-stack-reason": "" }, s.reason));
    box.append(head);
    if (s.verdict) {
      // Stacks a few seconds apart (an overdue call's, a trial's): hung there, or slow and busy.
      box.append(el("p", { class: "stack-verdict " + (s.hung ? "hung" : "busy"),
                           "data-stack-verdict": "" }, s.verdict));
    }
    if (s.state !== "taken") return;
    box.append(el("pre", { class: "stack", "data-stack-text": "" }, s.text));
    if (s.reason) box.append(el("p", { class: "muted" }, "Tried first: " + s.reason));
  }

  window.raywatch.renderStack = renderStack;
})();
