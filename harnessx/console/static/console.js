// The console's live parts, no build step: the runs page refreshes its table while it shows
// the newest runs; a run's page follows the run's events (Server-Sent Events) and refreshes
// its state when something happens. Everything inserted from data is text, never HTML; the
// fragments fetched from the console are rendered (and escaped) by the server.
(function () {
  "use strict";

  function replaceWith(target, url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (response.ok && !response.redirected) { return response.text(); }
        return null;
      })
      .then(function (html) {
        if (html !== null) { target.innerHTML = html; }
      })
      .catch(function () { /* the next round tries again */ });
  }

  var runs = document.getElementById("runs");
  if (runs && runs.dataset.live) {
    setInterval(function () { replaceWith(runs, runs.dataset.live); }, 2000);
  }

  var timeline = document.getElementById("timeline");
  var body = document.getElementById("run-body");
  if (timeline && body && window.EventSource) {
    var state = document.getElementById("live-state");
    // A run's streamed pieces (text, thinking, a tool call's arguments as they are written):
    // the events that follow them (text_complete, tool_call_start) show them whole.
    var noisy = { text_delta: true, thinking_delta: true, tool_call_delta: true };
    var moves = {
      tool_call_start: true, tool_call_complete: true, tool_result: true, approval_required: true,
      recovery_required: true, waiting: true, run_result: true, error: true, turn_complete: true,
      attempt_reset: true
    };
    // One refresh at a time: two in flight could answer out of order and leave the older
    // state on the page after the run's last event. A refresh asked for meanwhile runs
    // after it, so the page ends with a state read after the last event it saw.
    var busy = false;
    var again = false;
    var refresh = function () {
      if (busy) { again = true; return; }
      busy = true;
      setTimeout(function () {
        replaceWith(body, body.dataset.refresh).then(function () {
          busy = false;
          if (again) { again = false; refresh(); }
        });
      }, 150);
    };
    var source = new EventSource(timeline.dataset.events);
    source.onopen = function () { state.textContent = "live"; };
    source.onerror = function () {
      // Closed: the run is over (204 from the console); otherwise the browser reconnects.
      state.textContent = source.readyState === EventSource.CLOSED ? "run finished" : "reconnecting";
    };
    source.onmessage = function (message) {
      var event = JSON.parse(message.data);
      if (!noisy[event.type]) {
        var item = document.createElement("li");
        item.className = "event-" + event.type;
        item.dataset.cursor = event.cursor;
        var cursor = document.createElement("span");
        cursor.className = "cursor";
        cursor.textContent = event.cursor;
        var kind = document.createElement("b");
        kind.textContent = event.type;
        var data = document.createElement("span");
        data.className = "muted";
        data.textContent = " " + JSON.stringify(event.data).slice(0, 160);
        item.append(cursor, " ", kind, data);
        timeline.appendChild(item);
        timeline.scrollTop = timeline.scrollHeight;
      }
      if (moves[event.type]) { refresh(); }
    };
  }
})();
