// Shared by every shopper page: language choice on the cached page, time left to pay on
// the orders page. Exposes window.shop for activity.js.
(function () {
  "use strict";

  function cookie(name) {
    const m = document.cookie.match(new RegExp("(?:^|; )" + name.replace(/[.$?*|{}()[\]\\/+^]/g, "\\$&") + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : null;
  }

  function format(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, key) => (key in values ? String(values[key]) : ""));
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  // "mm:ss" below an hour, "h:mm:ss" below a day, "N d hh:mm:ss" beyond.
  function duration(ms, daysTemplate) {
    const total = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(total / 86400);
    const h = Math.floor((total % 86400) / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    const clock = h || d ? `${d ? pad(h) : h}:${pad(m)}:${pad(s)}` : `${pad(m)}:${pad(s)}`;
    return d ? `${format(daysTemplate || "%(days)s d", { days: d })} ${clock}` : clock;
  }

  // A clock on the server's time: anchored to a server timestamp and the monotonic
  // performance.now() when it was taken, so the client's wall clock never enters.
  function serverClock(serverIso, anchor) {
    const serverMs = Date.parse(serverIso);
    const at = anchor === undefined ? performance.now() : anchor;
    return () => serverMs + (performance.now() - at);
  }

  // One clock (core/clock.py): the shop's zone from the page, 24-hour, labelled with the
  // zone's name ("15:14:01 Asia/Shanghai"), never the browser's zone or 12-hour clock.
  function shopTime(iso, withDate) {
    const zone = document.documentElement.dataset.timeZone || "UTC";
    const options = { timeZone: zone, hourCycle: "h23", hour: "2-digit", minute: "2-digit", second: "2-digit" };
    if (withDate) Object.assign(options, { year: "numeric", month: "2-digit", day: "2-digit" });
    const parts = new Intl.DateTimeFormat(document.documentElement.lang || "en", options).formatToParts(new Date(iso));
    const part = (type) => (parts.find((p) => p.type === type) || {}).value || "";
    const time = `${part("hour")}:${part("minute")}:${part("second")} ${zone}`;
    return withDate ? `${part("year")}-${part("month")}-${part("day")} ${time}` : time;
  }

  // The cached activity page has one URL per language. Follow the shopper's explicit
  // choice (the language cookie, set by the switch) or else the browser's languages.
  function chooseLanguage() {
    const nav = document.querySelector("nav.lang[data-language-cookie]");
    if (!nav) return;
    const cookieName = nav.dataset.languageCookie;
    const links = Array.from(nav.querySelectorAll("a[data-language]"));
    const here = document.querySelector("[data-language]#sale")?.dataset.language;
    links.forEach((a) =>
      a.addEventListener("click", () => {
        const secure = window.location.protocol === "https:" ? "; secure" : "";
        document.cookie = `${cookieName}=${a.dataset.language}; path=/; max-age=31536000; samesite=lax${secure}`;
        // Told to the server's switch too (set_language): a signed-in shopper's mails follow it.
        const csrf = nav.dataset.switchUrl && cookie(nav.dataset.csrfCookie || "csrftoken");
        if (!csrf) return;
        fetch(nav.dataset.switchUrl, {
          method: "POST",
          keepalive: true, // the page is being left
          credentials: "same-origin",
          redirect: "manual",
          headers: { "X-CSRFToken": csrf },
          body: new URLSearchParams({ language: a.dataset.language, next: a.pathname }),
        }).catch(() => {});
      })
    );
    // A language in the URL (/zh-hans/seckill/1/) is the one asked for: a link to it opens
    // in it, whatever the browser or an older choice says. Only the unprefixed URL follows them.
    if (here && here !== nav.dataset.defaultLanguage) return;
    let wanted = cookie(cookieName);
    if (!wanted) {
      const codes = links.map((a) => a.dataset.language);
      for (const tag of navigator.languages || [navigator.language]) {
        const t = (tag || "").toLowerCase();
        const match = t.startsWith("zh") ? codes.find((c) => c.startsWith("zh")) : codes.find((c) => t.split("-")[0] === c);
        if (match) { wanted = match; break; }
      }
    }
    const target = links.find((a) => a.dataset.language === wanted);
    if (target && wanted !== here) window.location.replace(target.href);
  }

  // Orders page: time left to pay, counted on the server's clock of the page.
  function timeLeft() {
    const serverNow = document.body.dataset.serverNow;
    const cells = document.querySelectorAll(".time-left[data-deadline]");
    if (!serverNow || !cells.length) return;
    const now = serverClock(serverNow);
    function tick() {
      cells.forEach((cell) => {
        const left = Date.parse(cell.dataset.deadline) - now();
        cell.dataset.remainingMs = String(Math.max(0, Math.round(left)));
        if (left <= 0) {
          cell.textContent = cell.dataset.expired;
          cell.closest("tr")?.querySelectorAll("button.pay").forEach((b) => (b.disabled = true));
        } else {
          cell.textContent = duration(left);
        }
      });
      setTimeout(tick, 500);
    }
    tick();
  }

  window.shop = { cookie, format, duration, serverClock, shopTime };
  chooseLanguage();
  timeLeft();
})();
