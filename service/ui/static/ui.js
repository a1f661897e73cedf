// vllm-sentinel dashboard: progressive enhancement only. Every page reads fine without
// this script; with it, the incident list refreshes itself every few seconds.
(function () {
  "use strict";

  function liveList() {
    var live = document.getElementById("live");
    var results = document.getElementById("results");
    if (!live || !results || !window.fetch) return;
    var every = Math.max(2, parseInt(live.getAttribute("data-poll"), 10) || 10) * 1000;
    var paused = false;
    var timer = null;

    var toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "secondary";
    toggle.setAttribute("aria-pressed", "false");
    toggle.textContent = "Pause live updates";
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.setAttribute("aria-pressed", paused ? "true" : "false");
      toggle.textContent = paused ? "Resume live updates" : "Pause live updates";
      if (!paused) refresh();
    });
    live.parentNode.appendChild(toggle);

    function stamp(text) {
      live.textContent = text;
    }

    function url() {
      var q = new URLSearchParams(window.location.search);
      q.set("fragment", "1");
      return window.location.pathname + "?" + q.toString();
    }

    function schedule() {
      clearTimeout(timer);
      timer = setTimeout(refresh, every);
    }

    function refresh() {
      if (paused || document.hidden) { schedule(); return; }
      fetch(url(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.status === 401) { stamp("Signed out: reload the page to sign in again."); return null; }
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          if (html === null) return;
          // keep the focus where it was when the row it was on is still there
          var active = document.activeElement;
          var href = active && results.contains(active) ? active.getAttribute("href") : null;
          results.innerHTML = html;
          if (href) {
            var again = results.querySelector('a[href="' + href.replace(/"/g, '\\"') + '"]');
            if (again) again.focus();
          }
          var t = new Date();
          stamp("Live: updated " + t.toISOString().slice(11, 19) + " UTC, every " + every / 1000 + " s.");
          schedule();
        })
        .catch(function () {
          stamp("Live updates failed; retrying.");
          schedule();
        });
    }

    stamp("Live: updates every " + every / 1000 + " s.");
    schedule();
    document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
  }

  function confirmForms() {
    // a second look before muting pages or resolving (the server does not depend on it)
    var forms = document.querySelectorAll("form[data-confirm]");
    Array.prototype.forEach.call(forms, function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveList();
    confirmForms();
  });
})();
