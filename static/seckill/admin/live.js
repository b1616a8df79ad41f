// The admin's live view of a sale (templates/admin/seckill/activity/live.html): asks the
// page's JSON endpoint for the figures every few seconds and writes them in place.
(function () {
  "use strict";
  var root = document.querySelector(".sale-board[data-url]");
  if (!root) return;
  var every = (parseInt(root.dataset.every, 10) || 5) * 1000;
  // One clock: the shop's zone, 24-hour, whatever the browser's zone and locale
  // (core/clock.py writes the same on the server).
  var clock = new Intl.DateTimeFormat(root.dataset.lang || "en", {
    timeZone: root.dataset.zone || "UTC", hourCycle: "h23", hour: "2-digit", minute: "2-digit", second: "2-digit"
  });

  function field(name) { return root.querySelector('[data-field="' + name + '"]'); }
  function text(name, value) {
    var el = field(name);
    if (el) el.textContent = value === null || value === undefined ? "–" : String(value);
  }
  function rows(name, pairs) {
    var table = field(name);
    if (!table) return;
    table.replaceChildren();
    pairs.forEach(function (pair) {
      var tr = document.createElement("tr"), th = document.createElement("th"), td = document.createElement("td");
      th.textContent = pair[0];
      td.textContent = String(pair[1]);
      tr.append(th, td);
      table.append(tr);
    });
  }
  function minutes(list, peak) {
    var ol = field("orders_per_minute");
    if (!ol) return;
    ol.replaceChildren();
    list.forEach(function (m) {
      var li = document.createElement("li"), meter = document.createElement("meter"), span = document.createElement("span");
      meter.min = 0;
      meter.max = peak;
      meter.value = m.orders;
      span.textContent = m.minute + " · " + m.orders;
      li.append(meter, span);
      ol.append(li);
    });
  }
  function lastCheck(check) {
    if (!check) return "no stock check yet";
    if (check.stock_agrees) return "last stock check: every unit accounted for";
    return "last stock check: some units not accounted for (live counter " + check.redis_drift +
      ", shop records " + check.db_drift + "); see the anomalies";
  }

  function show(f) {
    var badge = field("status");
    badge.textContent = f.status;
    badge.title = f.status_help;
    badge.className = "sale-badge sale-" + f.status.replace(/ /g, "-");
    text("status_help", f.status_help);
    var meter = field("sold_meter");
    meter.max = f.total;
    meter.value = f.sold;
    text("sold", f.sold);
    text("left", f.left);
    text("left_note", f.left_source === "database" ? "left as the database counts it (the live count is not available)" : "");
    text("reserved_note", f.reserved_not_ordered ? f.reserved_not_ordered + " reserved, order being written" : "");
    text("orders_last_minute", f.orders_last_minute);
    minutes(f.orders_per_minute, f.orders_peak);
    text("revenue", f.revenue);
    text("awaiting_payment", f.awaiting_payment);
    text("orders.paid", f.orders.paid);
    text("orders.pending", f.orders.pending);
    text("orders.cancelled", f.orders.cancelled);
    text("sell_out", f.sell_out);
    text("refusals.total", f.refusals.total);
    rows("refusals.by_reason", Object.entries(f.refusals.by_reason || {}));
    text("anomalies.open", f.anomalies.open);
    rows("anomalies.by_kind", Object.entries(f.anomalies.by_kind));
    text("last_check", lastCheck(f.anomalies.last_check));
    text("updated", clock.format(new Date(f.now)));
    root.dataset.refreshed = String((parseInt(root.dataset.refreshed, 10) || 0) + 1);
  }

  function poll() {
    fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (figures) { show(figures); field("stale").hidden = true; })
      .catch(function () { field("stale").hidden = false; })
      .finally(function () { setTimeout(poll, document.hidden ? every * 3 : every); });
  }
  setTimeout(poll, every);
})();
