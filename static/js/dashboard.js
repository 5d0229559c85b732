// Live ages and countdowns between refreshes, and the switch that pauses refreshing.
// No dependencies; htmx, when present, does the refreshing itself.
(function () {
  "use strict";

  // Server time minus browser time: ages count from the server's clock, which judged the
  // rows, not from a laptop clock that may be minutes off.
  var clockOffset = 0;
  var PAUSE_KEY = "dashboard:refresh-paused:";

  // The active language's words (<body data-time-words>, from dashboard.timefmt.js_time_words);
  // English when a page has none (the error pages).
  var WORDS = {
    s: "{n} s", min: "{n} min", h: "{n} h", d: "{n} d",
    ago: "{d} ago", "in": "in {d}", expired_for: "expired for {d}", expired: "expired",
    due_for: "due {d} ago, not confirmed yet", unknown: "unknown",
    pause: "Pause refresh", resume: "Resume refresh",
    refresh_failed: "Refreshing failed; this is old data.",
    paused_at: "Paused at %(time)s", zone: "",
    tz_question: "Show times in %(zone)s (your browser's zone)?"
  };
  (function readWords() {
    var raw = document.body && document.body.getAttribute("data-time-words");
    if (!raw) return;
    try {
      var given = JSON.parse(raw);
      for (var key in given) {
        if (Object.prototype.hasOwnProperty.call(given, key)) WORDS[key] = given[key];
      }
    } catch (e) {
      // Keep English rather than break the ticking.
    }
  })();

  function fill(pattern, marker, value) {
    return pattern.split(marker).join(value);
  }

  // The same coarse units as dashboard.timefmt.format_duration.
  function formatDuration(ms) {
    var s = Math.floor(Math.abs(ms) / 1000);
    if (s < 120) return fill(WORDS.s, "{n}", s);
    if (s < 7200) return fill(WORDS.min, "{n}", Math.floor(s / 60));
    if (s < 172800) return fill(WORDS.h, "{n}", Math.floor(s / 3600));
    return fill(WORDS.d, "{n}", Math.floor(s / 86400));
  }

  function syncClock(root) {
    var holder = root.matches && root.matches("[data-server-now]") ? root : root.querySelector("[data-server-now]");
    if (!holder) return;
    var serverNow = Date.parse(holder.getAttribute("data-server-now"));
    if (!isNaN(serverNow)) clockOffset = serverNow - Date.now();
  }

  // A held lease whose expiry passes between two refreshes is not known to be expired: the
  // page's data vouches only for its as-of moment, and a renewal may be on its way. It reads
  // "unknown" until the server, whose data is then current past the expiry, says "expired".
  function markDue(time) {
    var row = time.closest("[data-state='held']");
    if (!row) return;
    row.setAttribute("data-state", "unknown");
    if (row.tagName === "TR") row.classList.remove("row-quiet");
    var pill = row.querySelector("[data-state-pill]");
    if (pill) {
      pill.className = "pill pill-warn";
      pill.textContent = WORDS.unknown;
    }
  }

  function tick() {
    var now = Date.now() + clockOffset;
    var still = frozenRegions();
    var ages = document.querySelectorAll("[data-age-from]");
    for (var i = 0; i < ages.length; i++) {
      if (isFrozen(ages[i], still)) continue;
      var from = Date.parse(ages[i].getAttribute("data-age-from"));
      if (isNaN(from)) continue;
      var age = now - from;
      // data-age-pattern: a whole translated sentence with {d} for the duration (e.g.
      // "{d} so far"); data-suffix: the older spelling, words appended after the duration.
      var pattern = ages[i].getAttribute("data-age-pattern");
      var suffix = ages[i].getAttribute("data-suffix");
      if (pattern !== null) {
        ages[i].textContent = fill(pattern, "{d}", formatDuration(Math.max(0, age)));
      } else if (suffix !== null) {
        ages[i].textContent = formatDuration(Math.max(0, age)) + suffix;
      } else {
        ages[i].textContent = fill(age >= 0 ? WORDS.ago : WORDS["in"], "{d}", formatDuration(age));
      }
    }
    var countdowns = document.querySelectorAll("[data-expires-at]");
    for (var j = 0; j < countdowns.length; j++) {
      // A paused region keeps the words of its data's moment: counting down from old data
      // would turn healthy leases "expired" (issue 13).
      if (isFrozen(countdowns[j], still)) continue;
      var at = Date.parse(countdowns[j].getAttribute("data-expires-at"));
      if (isNaN(at)) continue;
      var left = at - now;
      if (left > 0) {
        countdowns[j].textContent = fill(WORDS["in"], "{d}", formatDuration(left));
      } else if (countdowns[j].closest("[data-state='expired']")) {
        // The server judged it expired (its data is current past the expiry).
        countdowns[j].textContent = fill(WORDS.expired_for, "{d}", formatDuration(left));
      } else {
        countdowns[j].textContent = fill(WORDS.due_for, "{d}", formatDuration(left));
        markDue(countdowns[j]);
      }
    }
  }

  function isPaused(id) {
    try {
      return window.localStorage.getItem(PAUSE_KEY + id) !== null;
    } catch (e) {
      return false; // storage disabled: never paused
    }
  }

  // The regions one switch pauses: the one named by it, and those that say data-pause-with
  // (the overview pauses all of its regions at once).
  function regionsOf(id) {
    var regions = [];
    var own = document.getElementById(id);
    if (own) regions.push(own);
    var others = document.querySelectorAll("[data-pause-with]");
    for (var i = 0; i < others.length; i++) {
      if (others[i].getAttribute("data-pause-with") === id && others[i] !== own) regions.push(others[i]);
    }
    return regions;
  }

  function regionPaused(region) {
    return isPaused(region.id) || (region.hasAttribute("data-pause-with") && isPaused(region.getAttribute("data-pause-with")));
  }

  // Switch id -> the moment (server clock, ms) its regions froze. A region stays frozen from
  // the pause until the refresh that follows a resume has landed, so nothing ticks on old data.
  var frozen = {};

  function frozenRegions() {
    var regions = [];
    for (var id in frozen) {
      if (Object.prototype.hasOwnProperty.call(frozen, id)) regions = regions.concat(regionsOf(id));
    }
    return regions;
  }

  function isFrozen(element, regions) {
    for (var i = 0; i < regions.length; i++) {
      if (regions[i].contains(element)) return true;
    }
    return false;
  }

  // "Paused at 03:12:09", in the page's language and time zone.
  function clockText(ms) {
    var lang = document.documentElement.lang || undefined;
    var options = { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
    try {
      if (WORDS.zone) options.timeZone = WORDS.zone;
      return new Date(ms).toLocaleTimeString(lang, options);
    } catch (e) {
      delete options.timeZone;
      return new Date(ms).toLocaleTimeString(lang, options);
    }
  }

  function pausedNote(button) {
    var id = button.getAttribute("data-refresh-toggle");
    var note = document.querySelector("[data-paused-note='" + id + "']");
    if (!note) {
      // Pages without their own note get one beside the switch; role=status so the change
      // is announced once, when the switch is pressed.
      note = document.createElement("span");
      note.className = "muted";
      note.setAttribute("data-paused-note", id);
      note.setAttribute("role", "status");
      button.insertAdjacentElement("afterend", note);
    }
    return note;
  }

  // A paused region skips its timed refreshes. htmx asks before each request (htmx:confirm);
  // a poll has no triggering event, so clicks and filter changes still go through. This is
  // not an hx-trigger filter (`every 5s [...]`) because htmx evaluates those with eval, which
  // the Content-Security-Policy refuses. The polling timer keeps running, so a resumed
  // region refreshes again without being re-armed.
  document.addEventListener("htmx:confirm", function (event) {
    var detail = event.detail || {};
    var region = detail.elt;
    if (region && region.id && !detail.triggeringEvent && regionPaused(region)) {
      event.preventDefault();
    }
  });

  function showToggle(button) {
    var id = button.getAttribute("data-refresh-toggle");
    var paused = isPaused(id);
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    button.textContent = paused ? WORDS.resume : WORDS.pause;
    var regions = regionsOf(id);
    for (var i = 0; i < regions.length; i++) regions[i].classList.toggle("paused", paused);
    var note = pausedNote(button);
    var text = paused && frozen[id] ? fill(WORDS.paused_at, "%(time)s", clockText(frozen[id])) : "";
    if (note.textContent !== text) note.textContent = text;
  }

  function showToggles() {
    var buttons = document.querySelectorAll("[data-refresh-toggle]");
    for (var i = 0; i < buttons.length; i++) showToggle(buttons[i]);
  }

  // Resuming refreshes every region first; ages and countdowns tick again only once the new
  // data is in (or the attempt failed, which the failure note then says).
  function resume(id) {
    var regions = regionsOf(id);
    var thaw = function () {
      delete frozen[id];
      showToggles();
      tick();
    };
    if (!window.htmx || !regions.length) {
      thaw();
      return;
    }
    var pending = [];
    for (var i = 0; i < regions.length; i++) {
      var region = regions[i];
      var url = region.getAttribute("hx-get");
      if (!url) continue;
      var request = window.htmx.ajax("GET", url, { source: region, target: region, swap: "outerHTML" });
      if (request && request.then) pending.push(request.then(null, function () {}));
    }
    if (window.Promise && pending.length) Promise.all(pending).then(thaw, thaw);
    else thaw();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-refresh-toggle]");
    if (!button) return;
    var id = button.getAttribute("data-refresh-toggle");
    var pause = !isPaused(id);
    var moment = Date.now() + clockOffset;
    try {
      if (pause) window.localStorage.setItem(PAUSE_KEY + id, String(moment));
      else window.localStorage.removeItem(PAUSE_KEY + id);
    } catch (e) {
      return;
    }
    if (pause) frozen[id] = moment;
    showToggle(button);
    if (!pause) resume(id);
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
    announceProgress();
    keyboardScrollableTables();
  });

  // At phone widths a table scrolls sideways in its own box (dashboard.css). Such a box must
  // be reachable by keyboard: one with nothing focusable inside becomes a tab stop, named by
  // its card's heading; one that fits, or has links to tab through, is left as it is.
  var FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";
  function keyboardScrollableTables() {
    var tables = document.querySelectorAll("table.table");
    for (var i = 0; i < tables.length; i++) {
      var table = tables[i];
      var needsStop = table.scrollWidth > table.clientWidth + 1 && !table.querySelector(FOCUSABLE);
      var ours = table.hasAttribute("data-scroll-focus");
      if (needsStop && !ours && !table.hasAttribute("tabindex")) {
        table.setAttribute("tabindex", "0");
        table.setAttribute("data-scroll-focus", "");
        var card = table.closest("section, .card");
        var heading = card && card.querySelector("h2, h3");
        if (heading && !table.hasAttribute("aria-label") && !table.hasAttribute("aria-labelledby")) {
          table.setAttribute("aria-label", heading.textContent.replace(/\s+/g, " ").trim());
          table.setAttribute("data-scroll-named", "");
        }
      } else if (!needsStop && ours) {
        table.removeAttribute("tabindex");
        table.removeAttribute("data-scroll-focus");
        if (table.hasAttribute("data-scroll-named")) {
          table.removeAttribute("aria-label");
          table.removeAttribute("data-scroll-named");
        }
      }
    }
  }
  // Once per frame however many resize events come (a phone turned, a window dragged).
  var resizeFrame = 0;
  window.addEventListener("resize", function () {
    window.cancelAnimationFrame(resizeFrame);
    resizeFrame = window.requestAnimationFrame(keyboardScrollableTables);
  });

  // A region that refreshes whole (a resize request's page) says its progress in one
  // sentence (data-progress-said); the page's polite live region gets it only when it
  // changed, so a screen reader hears each change once, not the region every 2 s.
  var progressSaid = null;
  function announceProgress() {
    var announcer = document.querySelector("[data-progress-announcer]");
    var region = document.querySelector("[data-progress-said]");
    if (!announcer || !region) return;
    var said = region.getAttribute("data-progress-said");
    if (progressSaid !== null && said !== progressSaid) announcer.textContent = said;
    progressSaid = said;
  }

  // A failed refresh leaves the old rows in place; say so, so they are not read as current.
  // The note in the region is for the eye; base.html's polite live region says it once per
  // failure (it is emptied by the next refresh that works), not on every poll that fails.
  function refreshFailed(event) {
    var region = event.detail && event.detail.elt;
    if (!region || !region.querySelector) return;
    var status = region.querySelector("[data-refresh-status]");
    if (status) status.classList.add("refresh-failed");
    if (status && !status.querySelector(".refresh-error")) {
      var note = document.createElement("strong");
      note.className = "refresh-error";
      note.textContent = " " + WORDS.refresh_failed + " ";
      status.insertBefore(note, status.firstChild);
    }
    var announcer = document.getElementById("refresh-announcer");
    if (announcer && announcer.textContent !== WORDS.refresh_failed) announcer.textContent = WORDS.refresh_failed;
  }
  document.addEventListener("htmx:responseError", refreshFailed);
  document.addEventListener("htmx:sendError", refreshFailed);
  document.addEventListener("htmx:afterRequest", function (event) {
    var announcer = document.getElementById("refresh-announcer");
    if (announcer && event.detail && event.detail.successful && announcer.textContent) announcer.textContent = "";
  });

  // The browser's time zone, offered once (base.html's banner) when it differs from the zone
  // the pages use; either answer is posted and the server stops offering it.
  function offerTimeZone() {
    var offer = document.querySelector("[data-tz-offer]");
    if (!offer || !window.Intl || !Intl.DateTimeFormat) return;
    var zone = "";
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) {
      return;
    }
    if (!zone || zone === offer.getAttribute("data-active-zone")) return;
    var field = offer.querySelector("[data-tz-field]");
    var question = offer.querySelector("[data-tz-question]");
    if (!field || !question) return;
    field.value = zone;
    question.textContent = fill(WORDS.tz_question, "%(zone)s", zone);
    offer.hidden = false;
  }

  function start() {
    offerTimeZone();
    syncClock(document);
    // A page loaded while paused shows its data as rendered, and says from when.
    var buttons = document.querySelectorAll("[data-refresh-toggle]");
    for (var i = 0; i < buttons.length; i++) {
      var id = buttons[i].getAttribute("data-refresh-toggle");
      if (isPaused(id)) frozen[id] = Date.now() + clockOffset;
    }
    showToggles();
    announceProgress();
    keyboardScrollableTables();
    tick();
    window.setInterval(tick, 1000);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
