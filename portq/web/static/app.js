// portq dashboard: live refresh of the overview by polling /api/overview.
// Every value from the server is written with textContent or setAttribute on numbers,
// never as HTML, so queue names and other user data cannot become markup.
"use strict";
(function () {
  var body = document.body;
  var all = document.getElementById("select-all");   // the Jobs page's "select every row"
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("#select-form input[name=id]").forEach(function (box) {
        box.checked = all.checked;
      });
    });
  }
  var live = body.getAttribute("data-live");   // the Jobs list, or a job not yet finished
  if (live) {
    liveReload(live);
  }
  var table = document.getElementById("queues");
  if (!table) { return; }
  var base = body.getAttribute("data-base") || "";
  var poll = Math.max(1, parseFloat(body.getAttribute("data-poll")) || 5) * 1000;
  var SVG = "http://www.w3.org/2000/svg";
  var COUNTS = ["ready", "scheduled", "running", "succeeded", "dead", "cancelled"];

  // Fetch this very page again and swap in what changed: the rows of the Jobs list (not
  // while a row is ticked or a filter has focus), a job's whole page until it ends, or
  // the Throughput page's table.
  // The HTML comes from this server and is parsed inert (DOMParser runs no script).
  function liveReload(kind) {
    var every = Math.max(1, parseFloat(body.getAttribute("data-poll")) || 5) * 1000;
    function busy() {
      var active = document.activeElement;
      return document.querySelector("#select-form input[type=checkbox]:checked") ||
        (active && (active.tagName === "INPUT" || active.tagName === "SELECT"));
    }
    function swap(html) {
      var fresh = new DOMParser().parseFromString(html, "text/html");
      var id = { jobs: "jobs", job: "job-live", throughput: "throughput" }[kind];
      var now = document.getElementById(id);
      var next = fresh.getElementById(id);
      if (now && next) {
        now.replaceWith(document.importNode(next, true));
      }
      body.setAttribute("data-refreshed", String(Date.now()));
      return fresh.body.getAttribute("data-live");
    }
    function tick() {
      if (busy()) { window.setTimeout(tick, every); return; }
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
        .then(function (html) {
          if (swap(html)) { window.setTimeout(tick, every); }
        })
        .catch(function () {
          body.setAttribute("data-refresh-error", String(Date.now()));
          window.setTimeout(tick, every);
        });
    }
    window.setTimeout(tick, every);
  }

  function age(s) {
    if (s === null || s === undefined) { return "-"; }
    if (s < 60) { return s.toFixed(1) + " s"; }
    if (s < 3600) { return (s / 60).toFixed(1) + " min"; }
    if (s < 172800) { return (s / 3600).toFixed(1) + " h"; }
    return (s / 86400).toFixed(1) + " d";
  }

  function chart(values, dead) {
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("viewBox", "0 0 180 32");
    svg.setAttribute("width", "180");
    svg.setAttribute("height", "32");
    svg.setAttribute("role", "img");
    var top = Math.max.apply(null, values.concat([1]));
    svg.setAttribute("aria-label", "jobs finished per minute, last hour, peak " + top);
    values.forEach(function (v, i) {
      if (!v) { return; }
      var h = Math.max(1, 30 * v / top);
      var r = document.createElementNS(SVG, "rect");
      r.setAttribute("x", String(i * 3));
      r.setAttribute("y", String(32 - h));
      r.setAttribute("width", "2.4");
      r.setAttribute("height", String(h));
      var t = document.createElementNS(SVG, "title");
      t.textContent = (59 - i) + " min ago: " + v;
      r.appendChild(t);
      svg.appendChild(r);
      if (dead && dead[i]) {
        var d = Math.min(h, Math.max(1, 30 * dead[i] / top));
        var rd = document.createElementNS(SVG, "rect");
        rd.setAttribute("class", "dead");
        rd.setAttribute("x", String(i * 3));
        rd.setAttribute("y", String(32 - d));
        rd.setAttribute("width", "2.4");
        rd.setAttribute("height", String(d));
        svg.appendChild(rd);
      }
    });
    return svg;
  }

  function period(s) {
    if (s === null || s === undefined) { return "-"; }
    var units = [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];
    for (var i = 0; i < units.length; i++) {
      var n = s / units[i][1];
      if (n >= 1 && Number.isInteger(n)) { return n + units[i][0]; }
    }
    return (s * 1000) + "ms";
  }

  function limits(q) {  // the words of portq/web/queues.py limits_text
    var shown = [];
    if (q.concurrency_limit) { shown.push("\u2264 " + q.concurrency_limit + " running"); }
    if (q.rate_limit) { shown.push(q.rate_limit + " / " + period(q.rate_period_s)); }
    return shown;
  }

  function link(text, href) {
    var a = document.createElement("a");
    a.textContent = String(text);
    a.setAttribute("href", href);
    return a;
  }

  function cell(cls, field) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (field) { td.setAttribute("data-field", field); }
    return td;
  }

  function row(q) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-queue", q.queue);
    var qs = "?queue=" + encodeURIComponent(q.queue);
    var name = cell("", "");
    name.appendChild(link(q.queue, base + "/queues/" + encodeURIComponent(q.queue)));
    tr.appendChild(name);
    COUNTS.forEach(function (s) {
      var td = cell("n", s);
      td.appendChild(link(q[s], base + "/jobs" + qs + "&state=" + s));
      tr.appendChild(td);
    });
    var old = cell("n", "oldest_ready_age_s");
    old.textContent = age(q.oldest_ready_age_s);
    tr.appendChild(old);
    var w = cell("n", "workers");
    w.textContent = String(q.workers);
    tr.appendChild(w);
    var lim = cell("", "limits");
    if (q.paused) {
      var badge = document.createElement("span");
      badge.className = "badge paused";
      badge.textContent = "paused";
      lim.appendChild(badge);
      lim.appendChild(document.createTextNode(" "));
    }
    lim.appendChild(document.createTextNode(limits(q).join(", ")));
    tr.appendChild(lim);
    var c = cell("", "chart");
    c.appendChild(chart(q.finished_per_minute, q.dead_per_minute));
    tr.appendChild(c);
    var total = cell("n", "finished_last_hour");
    total.textContent = String(q.finished_last_hour);
    tr.appendChild(total);
    return tr;
  }

  function render(data) {
    var tbody = table.tBodies[0];
    var rows = data.queues.map(row);
    while (tbody.firstChild) { tbody.removeChild(tbody.firstChild); }
    if (!rows.length) {
      var tr = document.createElement("tr");
      tr.className = "empty";
      var td = document.createElement("td");
      td.setAttribute("colspan", "12");
      td.textContent = "No jobs yet.";
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    rows.forEach(function (r) { tbody.appendChild(r); });
    var updated = document.getElementById("updated");
    if (updated) {
      updated.textContent = "updated " + data.generated_at.replace("T", " ").replace("+00:00", " UTC");
    }
    body.setAttribute("data-refreshed", String(Date.now()));
  }

  function refresh() {
    fetch(base + "/api/overview", { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(render)
      .catch(function () { body.setAttribute("data-refresh-error", String(Date.now())); })
      .then(function () { window.setTimeout(refresh, poll); });
  }
  window.setTimeout(refresh, poll);
}());

// the job page: while the job runs, refresh its state and progress from /api/jobs/ID
(function () {
  var body = document.body;
  var cell = document.getElementById("progress");
  if (!cell || cell.getAttribute("data-running") !== "1") { return; }
  var base = body.getAttribute("data-base") || "";
  var poll = Math.max(1, parseFloat(body.getAttribute("data-poll")) || 5) * 1000;
  var url = base + "/api/jobs/" + encodeURIComponent(cell.getAttribute("data-job"));
  var bar = document.getElementById("progress-bar");

  function render(job) {
    var state = document.getElementById("state");
    state.textContent = job.state;
    state.className = "state " + job.state;
    document.getElementById("attempts").textContent = job.attempts + " / " + job.max_attempts;
    document.getElementById("progress-text").textContent = job.progress_text || "-";
    document.getElementById("progress-at").textContent =
      job.progress_at ? job.progress_at.replace("T", " ").replace("+00:00", " UTC") : "";
    bar.hidden = job.progress_at === null;
    if (job.progress === null) { bar.removeAttribute("value"); } else { bar.value = job.progress; }
    body.setAttribute("data-refreshed", String(Date.now()));
    return job.state === "running";
  }

  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (job) { if (render(job)) { window.setTimeout(refresh, poll); } })
      .catch(function () {
        body.setAttribute("data-refresh-error", String(Date.now()));
        window.setTimeout(refresh, poll);
      });
  }
  window.setTimeout(refresh, poll);
}());
