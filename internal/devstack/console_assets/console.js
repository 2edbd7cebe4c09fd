// ddb-outbox local console: refreshes the view fragment every second while
// "live" is checked, and sends the operator actions after a confirmation.
(function () {
  "use strict";
  var view = document.getElementById("view");
  var live = document.getElementById("live");
  var result = document.getElementById("result");
  var dialog = document.getElementById("confirm");
  var busy = false;

  function refresh() {
    if (busy || !live.checked || dialog.open) { return; }
    busy = true;
    fetch("/view", { cache: "no-store" }).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      view.innerHTML = html;
    }).catch(function (e) {
      result.textContent = "refresh failed (is make dev still running?): " + e.message;
      result.className = "bad";
    }).finally(function () { busy = false; });
  }
  setInterval(refresh, 1000);

  function send(btn) {
    var body = new URLSearchParams();
    Object.keys(btn.dataset).forEach(function (k) {
      if (k !== "action" && k !== "confirm") { body.append(k, btn.dataset[k]); }
    });
    result.textContent = "running…";
    result.className = "";
    fetch(btn.dataset.action, { method: "POST", body: body })
      .then(function (r) {
        return r.text().then(function (t) {
          result.textContent = t;
          result.className = r.ok ? "ok" : "bad";
        });
      }).catch(function (e) {
        result.textContent = "action failed: " + e.message;
        result.className = "bad";
      }).finally(refresh);
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest("button[data-action]");
    if (!btn) { return; }
    ev.preventDefault();
    document.getElementById("confirm-text").textContent = btn.dataset.confirm || "Run this action?";
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue === "ok") { send(btn); }
    };
    dialog.showModal();
  });
})();
