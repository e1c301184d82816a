// warrant's pages work without this script. It adds: live updates (server-sent events from
// /ui/live/<view>), the time left on each request, and times shown in the reader's zone.
"use strict";
(function () {
  function localTimes(root) {
    root.querySelectorAll("time.local").forEach(function (el) {
      var epoch = el.dataset.epoch ? Number(el.dataset.epoch) * 1000 : Date.parse(el.getAttribute("datetime"));
      if (!isNaN(epoch)) {
        // the reader's zone, named: "07/12/2026, 15:04:05 CET" (never a bare local time)
        el.textContent = new Date(epoch).toLocaleString(undefined, { timeZoneName: "short" });
        el.title = el.getAttribute("datetime");
      }
    });
  }

  function countdown() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-expires]").forEach(function (el) {
      var left = Math.floor(Number(el.dataset.expires) - now);
      if (left <= 0) { el.textContent = "expired"; el.classList.add("expired"); return; }
      var m = Math.floor(left / 60), s = left % 60;
      el.textContent = (m > 0 ? m + " min " : "") + s + " s left";
      el.classList.toggle("soon", left < 60);
    });
  }

  // Replace only the items whose mark changed: an unchanged item keeps its node, so focus
  // and anything typed into it stay.
  function morph(container, html) {
    var tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    var focused = document.activeElement && document.activeElement.id;
    var old = {};
    Array.prototype.forEach.call(container.children, function (el) { if (el.id) old[el.id] = el; });
    var next = [];
    Array.prototype.forEach.call(tpl.content.children, function (el) {
      var kept = el.id && old[el.id];
      next.push(kept && kept.dataset.mark === el.dataset.mark ? kept : el);
    });
    next.forEach(function (el, i) {
      if (container.children[i] !== el) container.insertBefore(el, container.children[i] || null);
    });
    while (container.children.length > next.length) container.removeChild(container.lastElementChild);
    localTimes(container);
    countdown();
    if (focused && !document.getElementById(focused)) { document.getElementById("main").focus(); }
  }

  function live() {
    var container = document.querySelector("[data-live]");
    if (!container || !window.EventSource) return;
    var source = new EventSource(container.dataset.live + "mark=" + encodeURIComponent(container.dataset.mark));
    source.addEventListener("fragment", function (e) { morph(container, e.data); document.body.dataset.updated = String(Date.now()); });
    source.addEventListener("logout", function () { source.close(); window.location.href = "/ui/login"; });
    source.addEventListener("open", function () { document.body.dataset.live = "open"; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    countdown();
    setInterval(countdown, 1000);
    live();
  });
})();
