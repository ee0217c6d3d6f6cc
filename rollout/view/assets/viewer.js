// rollout's viewer: copy as JSON, live rows of a running run (served), and, in the one-file
// static copy, the routing between pages and the task table's filters, sort and pages.
(function () {
  "use strict";
  var STATIC = document.body.dataset.mode === "static";

  // --- copy as JSON ---------------------------------------------------------------------------
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest("[data-copy]");
    if (!button) return;
    var text = document.getElementById(button.dataset.copy).textContent;
    var done = function () { var n = button.parentNode.querySelector("[data-copied]"); if (n) n.hidden = false; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else { fallbackCopy(text); done(); }
  });
  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text; document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } finally { area.remove(); }
  }

  // --- live: new tasks of a run still being written (served) ------------------------------------
  var run = document.querySelector("section.run-page[data-poll]");
  if (!STATIC && run && run.dataset.poll) {
    var offset = Number(run.dataset.offset), pending = 0;
    var page = Number(new URLSearchParams(location.search).get("page")) || 1, size = Number(run.dataset.pageSize);
    // New tasks come at the end of the file: they belong on this page only in file order and on the last page.
    var sorted = /[?&](sort|desc)=/.test(location.search);
    var appendable = !sorted && !run.querySelector("[data-pager] a[rel=next]");
    var poll = function () {
      var url = run.dataset.poll + (run.dataset.poll.indexOf("?") < 0 ? "?" : "&") + "offset=" + offset;
      fetch(url).then(function (r) { return r.ok ? r.json() : null; }).then(function (data) {
        if (!data) return;
        if (data.restarted) { location.reload(); return; }
        offset = data.offset;
        var total = run.querySelector("[data-count=tasks]");
        if (total) total.textContent = data.tasks.toLocaleString("en-US");
        var pages = Math.max(1, Math.ceil(data.matched / size));
        run.querySelector("[data-matched]").textContent = data.matched.toLocaleString("en-US") + " of "
          + data.tasks.toLocaleString("en-US") + " tasks" + (pages > 1 ? " · page " + Math.min(page, pages) + " of " + pages : "");
        if (!data.new) return;
        var live = run.querySelector("[data-live]");
        live.hidden = false;
        if (appendable) {
          run.querySelector("[data-rows]").insertAdjacentHTML("beforeend", data.rows);
          var empty = run.querySelector("[data-empty]"); if (empty) empty.remove();
          live.textContent = "Live: " + run.querySelectorAll("[data-rows] tr").length + " rows shown, " + data.tasks + " tasks in the run.";
        } else {
          pending += data.new;
          live.textContent = pending + " new matching task" + (pending === 1 ? "" : "s") + " since this page was loaded: "
            + (sorted ? "reload to see them in order." : "they come after this page.");
        }
      }).catch(function () {}).finally(function () { setTimeout(poll, 2000); });
    };
    setTimeout(poll, 2000);
  }

  if (!STATIC) {
    // A filter left at "any" or empty stays out of the URL, so a shared link says only what it filters.
    document.addEventListener("submit", function (ev) {
      Array.prototype.forEach.call(ev.target.elements, function (el) { if (el.name && el.value === "") el.disabled = true; });
    });
    return;
  }

  // --- the static file: one section per page, chosen by the URL's #route ------------------------
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.page"));
  function parse(hash) {
    var h = hash.replace(/^#/, "") || "/";
    var q = h.indexOf("?");
    return { path: q < 0 ? h : h.slice(0, q), params: new URLSearchParams(q < 0 ? "" : h.slice(q + 1)) };
  }
  function show(section) {
    sections.forEach(function (s) { s.classList.toggle("shown", s === section); });
  }
  function route() {
    var hash = location.hash;
    var target = hash && hash.charAt(1) !== "/" ? document.getElementById(decoded(hash.slice(1))) : null;
    if (target) {
      // An anchor of a task's timeline (a shared link to one moment): its task, with its neighbours in file order.
      var page = target.closest("section.page");
      show(page);
      if (page.classList.contains("task-page")) linkNeighbours(page, new URLSearchParams());
      target.scrollIntoView();
      return;
    }
    var r = parse(hash || "#/");
    var section = sections.find(function (s) { return s.dataset.route === r.path; }) || sections[0];
    show(section);
    if (section.classList.contains("run-page")) applyTable(section, r.params);
    if (section.classList.contains("task-page")) linkNeighbours(section, r.params);
    window.scrollTo(0, 0);
  }
  window.addEventListener("hashchange", route);
  function decoded(text) {
    try { return decodeURIComponent(text); } catch (e) { return text; }  // a link cut inside an escape
  }

  function rowsOf(runSection) { return Array.prototype.slice.call(runSection.querySelectorAll("[data-rows] tr")); }
  function matching(runSection, params) {
    var status = params.get("status") || "", right = params.get("right") || "", tool = params.get("tool") || "";
    var q = (params.get("q") || "").toLowerCase(), sort = params.get("sort") || "order", desc = params.get("desc") === "1";
    var rows = rowsOf(runSection).filter(function (tr) {
      var d = tr.dataset;
      return (!status || d.status === status) && (!right || d.right === right)
        && (!tool || d.tools.indexOf("," + tool + ",") >= 0) && (!q || d.text.indexOf(q) >= 0);
    });
    var key = function (tr) { var v = tr.dataset[sort]; return v === "" ? null : (isNaN(Number(v)) ? v : Number(v)); };
    rows.sort(function (x, y) {
      var a = key(x), b = key(y);
      if (a === b) return Number(x.dataset.order) - Number(y.dataset.order);
      if (a === null) return 1; if (b === null) return -1;
      return (a < b ? -1 : 1) * (desc ? -1 : 1);
    });
    return rows;
  }
  function query(params, changes) {
    var p = new URLSearchParams(params);
    Object.keys(changes || {}).forEach(function (k) { if (changes[k] === "" || changes[k] == null) p.delete(k); else p.set(k, changes[k]); });
    var s = p.toString();
    return s ? "?" + s : "";
  }
  function applyTable(section, params) {
    var route = section.dataset.route, size = Number(section.dataset.pageSize);
    var rows = matching(section, params), all = rowsOf(section);
    var pages = Math.max(1, Math.ceil(rows.length / size)), page = Math.min(Math.max(1, Number(params.get("page") || 1)), pages);
    var shown = rows.slice((page - 1) * size, page * size), body = section.querySelector("[data-rows]");
    all.forEach(function (tr) { tr.hidden = true; });
    shown.forEach(function (tr) {
      tr.hidden = false; body.appendChild(tr);
      tr.querySelector("a").setAttribute("href", "#" + route + "/task/" + tr.dataset.row + query(params, { page: "" }));
    });
    section.querySelector("[data-matched]").textContent = rows.length.toLocaleString("en-US") + " of " + all.length.toLocaleString("en-US")
      + " tasks" + (pages > 1 ? " · page " + page + " of " + pages : "");
    var pager = section.querySelector("[data-pager]");
    pager.innerHTML = "";
    [[page - 1, "← previous", page > 1], [page + 1, "next →", page < pages]].forEach(function (p) {
      if (!p[2]) return;
      var a = document.createElement("a"); a.textContent = p[1]; a.href = "#" + route + query(params, { page: p[0] }); pager.appendChild(a);
    });
    var form = section.querySelector("form.filters");
    ["status", "right", "tool", "q"].forEach(function (k) { form.elements[k].value = params.get(k) || ""; });
    section.querySelectorAll("a[data-sort]").forEach(function (a) {
      var same = (params.get("sort") || "order") === a.dataset.sort;
      a.textContent = a.dataset.heading + (same ? (params.get("desc") === "1" ? " ▼" : " ▲") : "");
      a.href = "#" + route + query(params, { sort: a.dataset.sort, desc: same && params.get("desc") !== "1" ? "1" : "", page: "" });
    });
    section.dataset.params = params.toString();
  }
  function linkNeighbours(section, params) {
    var runSection = sections.find(function (s) { return s.dataset.route === "/run/" + section.dataset.run; });
    var order = matching(runSection, params).map(function (tr) { return tr.dataset.row; });
    var k = order.indexOf(section.dataset.row), q = query(params, { page: "" });
    [["prev", order[k - 1]], ["next", order[k + 1]]].forEach(function (n) {
      var a = section.querySelector("[data-nav=" + n[0] + "]");
      a.hidden = k < 0 || n[1] === undefined;
      if (!a.hidden) a.href = "#/run/" + section.dataset.run + "/task/" + n[1] + q;
    });
    section.querySelector("[data-back]").href = "#/run/" + section.dataset.run + q;
  }
  document.addEventListener("submit", function (ev) {
    var form = ev.target, section = form.closest("section.page");
    ev.preventDefault();
    if (section.classList.contains("compare-page")) {
      location.hash = "#/compare/" + form.elements.a.value + "/" + form.elements.b.value;
      return;
    }
    var params = new URLSearchParams(section.dataset.params || "");
    ["status", "right", "tool", "q"].forEach(function (k) { params.set(k, form.elements[k].value.trim()); });
    location.hash = "#" + section.dataset.route + query(params, { status: params.get("status"), right: params.get("right"),
      tool: params.get("tool"), q: params.get("q"), page: "" });
  });
  route();
})();
