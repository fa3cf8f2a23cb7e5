// One time format on every page: "2026-11-23 15:41:55 UTC · 3 min ago". UTC unless
// RAYWATCH_TIME_DISPLAY=local (then the browser's zone, named). The server renders the
// same format ({{ value|stamp }}, dashboard/core/templatetags/rwtime.py) into <time
// class="stamp"> elements; this script re-renders those in the chosen zone and keeps
// their ages current.
(function () {
  "use strict";
  const local = document.body && document.body.dataset.time === "local";
  const AGE_TICK_MS = 30000;

  function toDate(value) {
    if (value === null || value === undefined || value === "") return null;
    const d = value instanceof Date ? value : new Date(typeof value === "number" ? value : String(value));
    return isNaN(d.getTime()) ? null : d;
  }
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  // The parts of a moment in the chosen zone.
  function parts(d) {
    return local
      ? [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds(), d.getMilliseconds()]
      : [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds()];
  }
  function zoneName(d) {
    if (!local) return "UTC";
    const name = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
      .formatToParts(d).find((p) => p.type === "timeZoneName");
    return name ? name.value : "local";
  }

  // "2026-11-23 15:41:55 UTC"; only the time of day with {date: false}.
  function abs(value, opts) {
    const d = toDate(value);
    if (!d) return "";
    const [y, mo, day, h, mi, s] = parts(d);
    const clock = pad(h) + ":" + pad(mi) + ":" + pad(s) + " " + zoneName(d);
    return opts && opts.date === false ? clock : y + "-" + pad(mo) + "-" + pad(day) + " " + clock;
  }

  // A coarse length for ages: "42 s", "3 min", "5 h", "3 d".
  function age(s) {
    if (s === null || s === undefined || isNaN(s)) return "?";
    s = Math.abs(s);
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    if (s < 172800) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " d";
  }
  // "3 min ago", or "in 2 h" for a moment still to come.
  function ago(value, nowMs) {
    const d = toDate(value);
    if (!d) return "";
    const s = ((nowMs === undefined ? Date.now() : nowMs) - d.getTime()) / 1000;
    if (Math.abs(s) < 2) return "just now";
    return s >= 0 ? age(s) + " ago" : "in " + age(s);
  }
  // A precise length for durations: "42 s", "3 min 12 s", "5 h 4 min", "3 d 2 h".
  function duration(s) {
    if (s === null || s === undefined || isNaN(s)) return "–";
    s = Math.max(0, Math.round(s));
    const two = (big, bigUnit, small, smallUnit) => big + " " + bigUnit + (small ? " " + small + " " + smallUnit : "");
    if (s < 60) return s + " s";
    if (s < 3600) return two(Math.floor(s / 60), "min", s % 60, "s");
    if (s < 86400) return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
    return two(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
  }

  function stamp(value) {
    const d = toDate(value);
    return d ? abs(d) + " · " + ago(d) : "";
  }

  // A <time> element showing `value`; opts: {ago: false} for the moment alone,
  // {date: false} for the time of day alone (beside a moment that gives the date).
  function render(node) {
    const d = toDate(node.getAttribute("datetime"));
    if (!d) return;
    const mode = node.dataset.mode || "ago";
    const text = abs(d, { date: mode !== "time" });
    if (mode !== "ago") { node.textContent = text; return; }
    let since = node.querySelector(".ago");
    if (!since) since = document.createElement("span");
    since.className = "ago";
    since.textContent = ago(d); // raywatch.css puts " · " before it, or a line break in tables
    node.replaceChildren(text, since);
  }
  function el(value, opts) {
    const d = toDate(value);
    const node = document.createElement("time");
    if (!d) return node;
    node.className = "stamp";
    node.setAttribute("datetime", d.toISOString());
    node.dataset.mode = opts && opts.ago === false ? "abs" : opts && opts.date === false ? "time" : "ago";
    node.title = d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
    render(node);
    return node;
  }
  function refresh(root) {
    for (const node of (root || document).querySelectorAll("time.stamp[datetime]")) render(node);
  }

  // For Plotly's date axes, which show a date string as written: the moment in the
  // chosen zone, and back (a zoom's range comes back in that form).
  function axis(ms) {
    const [y, mo, day, h, mi, s, milli] = parts(new Date(ms));
    return y + "-" + pad(mo) + "-" + pad(day) + " " + pad(h) + ":" + pad(mi) + ":" + pad(s) + "." + pad(milli, 3);
  }
  function fromAxis(v) {
    if (typeof v === "number") return v;
    const iso = String(v).replace(" ", "T");
    return new Date(local ? iso : iso + "Z").getTime();
  }
  const axisTitle = local ? "time (" + zoneName(new Date()) + ")" : "time (UTC)";

  document.addEventListener("DOMContentLoaded", () => refresh());
  setInterval(refresh, AGE_TICK_MS);

  window.raywatch = window.raywatch || {};
  window.raywatch.time = { local, abs, age, ago, duration, stamp, el, refresh, axis, fromAxis, axisTitle };
})();
