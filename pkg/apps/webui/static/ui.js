// utpmesh UI: live updates over Server-Sent Events. A "turn" event re-fetches
// the fragment this page shows (the turn list, or this turn when it is the
// one named); "resync" (events were dropped) re-fetches it whatever it is.
(function () {
  "use strict";
  var box = document.querySelector("[data-fragment]");
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var timer = null, busy = false, again = false;

  function openDetails() {
    var open = [];
    box.querySelectorAll("details[id][open]").forEach(function (d) { open.push(d.id); });
    return open;
  }

  function refresh() {
    timer = null;
    if (busy) { again = true; return; }
    busy = true;
    var keep = openDetails();
    fetch(box.dataset.fragment, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status + " " + r.statusText); } return r.text(); })
      .then(function (html) {
        box.innerHTML = html;
        keep.forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = true; } });
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      })
      .catch(function (err) { live.textContent = "live (refresh failed: " + err.message + ")"; })
      .then(function () { busy = false; if (again) { again = false; schedule(); } });
  }

  // schedule coalesces the events of one burst (command, report) into one fetch.
  function schedule() { if (!timer) { timer = setTimeout(refresh, 150); } }

  var es = new EventSource("/events");
  es.addEventListener("hello", function () {
    document.body.dataset.live = "on";
    live.className = "live on";
    live.textContent = "live";
  });
  es.addEventListener("turn", function (e) {
    if (!box) { return; }
    var ev = JSON.parse(e.data);
    if (box.dataset.refresh === "any" || box.dataset.turn === ev.turn) { schedule(); }
  });
  es.addEventListener("resync", function () { if (box) { schedule(); } });
  es.onerror = function () {
    document.body.dataset.live = "off";
    live.className = "live off";
    live.textContent = "reconnecting…";
  };
})();
