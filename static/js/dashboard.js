// Live ages and countdowns between refreshes, and the switch that pauses refreshing.
// No dependencies; htmx, when present, does the refreshing itself.
(function () {
  "use strict";

  // Server time minus browser time: ages count from the server's clock, which judged the
  // rows, not from a laptop clock that may be minutes off.
  var clockOffset = 0;
  var PAUSE_KEY = "dashboard:refresh-paused:";

  // The same coarse units as leases.selectors.format_duration.
  function formatDuration(ms) {
    var s = Math.floor(Math.abs(ms) / 1000);
    if (s < 120) return s + " s";
    if (s < 7200) return Math.floor(s / 60) + " min";
    if (s < 172800) return Math.floor(s / 3600) + " h";
    return Math.floor(s / 86400) + " d";
  }

  function syncClock(root) {
    var holder = root.matches && root.matches("[data-server-now]") ? root : root.querySelector("[data-server-now]");
    if (!holder) return;
    var serverNow = Date.parse(holder.getAttribute("data-server-now"));
    if (!isNaN(serverNow)) clockOffset = serverNow - Date.now();
  }

  function markExpired(time) {
    var row = time.closest("[data-state='held']");
    if (!row) return;
    row.setAttribute("data-state", "expired");
    if (row.tagName === "TR") {
      row.classList.remove("row-warn", "row-quiet");
      row.classList.add("row-bad");
    }
    var pill = row.querySelector("[data-state-pill]");
    if (pill) {
      pill.className = "pill pill-bad";
      pill.textContent = "expired";
    }
  }

  function tick() {
    var now = Date.now() + clockOffset;
    var ages = document.querySelectorAll("[data-age-from]");
    for (var i = 0; i < ages.length; i++) {
      var from = Date.parse(ages[i].getAttribute("data-age-from"));
      if (isNaN(from)) continue;
      var age = now - from;
      var suffix = ages[i].getAttribute("data-suffix");
      if (suffix !== null) {
        ages[i].textContent = formatDuration(Math.max(0, age)) + suffix;
      } else {
        ages[i].textContent = age >= 0 ? formatDuration(age) + " ago" : "in " + formatDuration(age);
      }
    }
    var countdowns = document.querySelectorAll("[data-expires-at]");
    for (var j = 0; j < countdowns.length; j++) {
      var at = Date.parse(countdowns[j].getAttribute("data-expires-at"));
      if (isNaN(at)) continue;
      var left = at - now;
      if (left > 0) {
        countdowns[j].textContent = "in " + formatDuration(left);
      } else {
        countdowns[j].textContent = "expired for " + formatDuration(left);
        markExpired(countdowns[j]);
      }
    }
  }

  function isPaused(id) {
    try {
      return window.localStorage.getItem(PAUSE_KEY + id) === "1";
    } catch (e) {
      return false; // storage disabled: never paused
    }
  }

  // A paused region skips its timed refreshes. htmx asks before each request (htmx:confirm);
  // a poll has no triggering event, so clicks and filter changes still go through. This is
  // not an hx-trigger filter (`every 5s [...]`) because htmx evaluates those with eval, which
  // the Content-Security-Policy refuses. The polling timer keeps running, so a resumed
  // region refreshes again without being re-armed.
  document.addEventListener("htmx:confirm", function (event) {
    var detail = event.detail || {};
    var region = detail.elt;
    if (region && region.id && !detail.triggeringEvent && isPaused(region.id)) {
      event.preventDefault();
    }
  });

  function showToggle(button) {
    var id = button.getAttribute("data-refresh-toggle");
    var paused = isPaused(id);
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    button.textContent = paused ? "Resume refresh" : "Pause refresh";
    var region = document.getElementById(id);
    if (region) region.classList.toggle("paused", paused);
  }

  function showToggles() {
    var buttons = document.querySelectorAll("[data-refresh-toggle]");
    for (var i = 0; i < buttons.length; i++) showToggle(buttons[i]);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-refresh-toggle]");
    if (!button) return;
    var id = button.getAttribute("data-refresh-toggle");
    var pause = !isPaused(id);
    try {
      if (pause) window.localStorage.setItem(PAUSE_KEY + id, "1");
      else window.localStorage.removeItem(PAUSE_KEY + id);
    } catch (e) {
      return;
    }
    showToggle(button);
    var region = document.getElementById(id);
    if (!pause && region && window.htmx) {
      // Resuming shows current data now, not at the next tick.
      window.htmx.ajax("GET", region.getAttribute("hx-get"), { source: region, target: region, swap: "outerHTML" });
    }
  });

  // A filter form sends only the filters that are set: URLs stay short and shareable.
  document.addEventListener("htmx:configRequest", function (event) {
    var form = event.detail.elt;
    if (!form.hasAttribute || !form.hasAttribute("data-drop-empty")) return;
    var data = event.detail.formData;
    var empty = [];
    data.forEach(function (value, key) {
      if (value === "") empty.push(key);
    });
    empty.forEach(function (key) {
      data.delete(key);
    });
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    syncClock(event.detail.target.isConnected ? event.detail.target : document);
    showToggles();
    tick();
  });

  // A failed refresh leaves the old rows in place; say so, so they are not read as current.
  function refreshFailed(event) {
    var region = event.detail && event.detail.elt;
    if (!region || !region.querySelector) return;
    var status = region.querySelector("[data-refresh-status]");
    if (status) status.classList.add("refresh-failed");
    if (status && !status.querySelector(".refresh-error")) {
      var note = document.createElement("strong");
      note.className = "refresh-error";
      note.textContent = " Refreshing failed; this is old data. ";
      status.insertBefore(note, status.firstChild);
    }
  }
  document.addEventListener("htmx:responseError", refreshFailed);
  document.addEventListener("htmx:sendError", refreshFailed);

  function start() {
    syncClock(document);
    showToggles();
    tick();
    window.setInterval(tick, 1000);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
