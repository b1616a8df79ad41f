// The activity page: countdown on the server's clock, the flag polled as
// flag.js?v=<random> (never cached), the buy button, the captcha when the activity
// asks for one, and the outcome.
// The page itself is the same for every visitor; everything about the visitor comes
// from /api/me, /api/activities/<id>/result and the captcha call, which are never cached.
(function () {
  "use strict";
  const sale = document.getElementById("sale");
  if (!sale || !window.shop) return;
  const { format, duration, serverClock } = window.shop;
  const T = JSON.parse(document.getElementById("sale-strings").textContent);
  const id = sale.dataset.activity;
  const button = document.getElementById("buy");
  const hint = document.getElementById("buy-hint");
  const countdown = document.getElementById("countdown");
  const outcome = document.getElementById("outcome");
  const stockLeft = document.getElementById("stock-left");
  const account = document.getElementById("account");
  // The account pages in this page's language: the paths the page was rendered with.
  const loginLink = document.getElementById("account-login");
  const loginPath = loginLink ? loginLink.pathname : "/accounts/login/";
  const logoutPath = (loginLink && loginLink.dataset.logout) || "/accounts/logout/";
  const captchaForm = document.getElementById("captcha");
  const captchaQuestion = document.getElementById("captcha-question");
  const captchaAnswer = document.getElementById("captcha-answer");
  const captchaSubmit = document.getElementById("captcha-submit");

  const COOLDOWN_MS = 10000;
  const state = {
    startMs: Date.parse(sale.dataset.start),
    endMs: Date.parse(sale.dataset.end),
    now: null, // server clock, known after the first flag
    token: null,
    ended: false,
    cooldownUntil: 0,
    retryShown: false, // "try again in N s" only after a failure, never after a win
    soldOut: false, // from the flag, or a purchase answered sold_out
    remaining: null, // units left to sell (the flag's display figure), null when unknown
    locked: false, // bought, or already took part: no more clicks
    me: null,
    csrf: "",
    order: null,
    // Per activity, so it may sit in the cached page; a 403 captcha_required asks anyway.
    captchaRequired: sale.dataset.captchaRequired === "true",
    challenge: null, // the captcha_id on show; each one is good for a single answer
  };
  let pollTimer = null;
  let pollGeneration = 0;

  function randomParam() {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // --- the flag ---------------------------------------------------------------------
  function loadFlag() {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      const sent = performance.now();
      // A stalled request must not stall the polling: give up on it after 10 s.
      const timeout = setTimeout(() => {
        script.remove();
        reject(new Error("flag timed out"));
      }, 10000);
      window.seckillOnFlag = (flag) => {
        clearTimeout(timeout);
        resolve({ flag, anchor: (sent + performance.now()) / 2 });
      };
      script.src = `${sale.dataset.flagUrl}?v=${randomParam()}`;
      script.onload = () => script.remove();
      script.onerror = () => {
        clearTimeout(timeout);
        script.remove();
        reject(new Error("flag unavailable"));
      };
      document.head.appendChild(script);
    });
  }

  function pollDelay() {
    if (state.ended) return null;
    if (state.token) return 30000; // live: look again now and then for the end
    const left = state.startMs - state.now();
    const jitter = 0.85 + Math.random() * 0.3; // spread the crowd's polls
    if (left > 300000) return 60000 * jitter;
    if (left > 60000) return 15000 * jitter;
    if (left > 10000) return 3000 * jitter;
    if (left > 1500) return 1000;
    // Right at the start: ask just after it, then every quarter second.
    return Math.max(250, left + 50);
  }

  async function poll() {
    clearTimeout(pollTimer);
    const generation = ++pollGeneration; // a newer poll supersedes this one: one chain only
    let delay = 2000;
    try {
      const { flag, anchor } = await loadFlag();
      if (generation !== pollGeneration) return;
      state.now = serverClock(flag.server_time, anchor);
      state.startMs = Date.parse(flag.start_at);
      state.endMs = Date.parse(flag.end_at);
      state.ended = flag.ended;
      state.token = flag.started && !flag.ended ? flag.token : null;
      state.soldOut = !!flag.sold_out;
      state.remaining = flag.remaining === undefined ? null : flag.remaining;
      render();
      delay = pollDelay();
    } catch (e) {
      if (generation !== pollGeneration) return;
      delay = 2000;
    }
    if (delay !== null) pollTimer = setTimeout(poll, delay);
  }

  // --- what the page shows -------------------------------------------------------------
  function render() {
    if (!state.now) return;
    const now = state.now();
    if (state.ended || now >= state.endMs) {
      countdown.textContent = T.ended;
      countdown.dataset.phase = "ended";
      countdown.dataset.remainingMs = "0";
    } else if (!state.token) {
      const left = state.startMs - now;
      countdown.dataset.phase = "upcoming";
      countdown.dataset.remainingMs = String(Math.max(0, Math.round(left)));
      countdown.textContent = left > 0 ? format(T.starts_in, { time: duration(left, T.days) }) : T.starting;
    } else if (state.soldOut) {
      countdown.dataset.phase = "sold_out";
      countdown.dataset.remainingMs = "0";
      countdown.textContent = T.sold_out_short;
    } else {
      countdown.dataset.phase = "live";
      countdown.dataset.remainingMs = "0";
      countdown.textContent = `${T.on_sale} ${format(T.ends_in, { time: duration(state.endMs - now, T.days) })}`;
    }
    const ended = state.ended || now >= state.endMs;
    stockLeft.textContent = !ended && state.remaining !== null ? format(T.left, { n: state.remaining }) : "";
    renderButton();
    renderOrderTimer();
  }

  function renderButton() {
    if (button.dataset.roomUrl) {
      // A waiting-room sale: the button leads to the room, which says when to buy.
      button.disabled = false;
      hint.textContent = "";
      return;
    }
    const onSale = !!state.token && !state.ended && state.now && state.now() < state.endMs;
    const live = onSale && !state.soldOut;
    const cooling = performance.now() < state.cooldownUntil;
    button.disabled = !live || cooling || state.locked;
    button.setAttribute("aria-disabled", String(button.disabled));
    if (state.locked) {
      hint.textContent = ""; // a win (or a purchase already made): the outcome says it all
    } else if (onSale && state.soldOut) {
      hint.textContent = T.hint_sold_out;
    } else if (cooling && state.retryShown) {
      hint.textContent = format(T.hint_retry, { seconds: Math.ceil((state.cooldownUntil - performance.now()) / 1000) });
    } else if (cooling) {
      hint.textContent = "";
    } else if (!live && !state.ended) {
      hint.textContent = state.me && !state.me.authenticated ? T.hint_login : T.hint_wait_start;
    } else {
      hint.textContent = state.me && !state.me.authenticated && live ? T.hint_login : "";
    }
  }

  function say(text, kind, extra) {
    outcome.replaceChildren();
    outcome.dataset.kind = kind || "";
    const p = document.createElement("p");
    p.className = `msg msg-${kind || "info"}`;
    p.textContent = text;
    outcome.appendChild(p);
    if (extra) outcome.appendChild(extra);
    // Where the shopper is looking: on a small screen the answer may fall below the fold.
    if (outcome.scrollIntoView) outcome.scrollIntoView({ block: "nearest" });
  }

  // --- the visitor: who, and the CSRF token, from an uncached call -------------------------
  async function loadMe() {
    try {
      const r = await fetch("/api/me", { cache: "no-store", credentials: "same-origin" });
      state.me = await r.json();
      state.csrf = state.me.csrf_token || "";
    } catch (e) {
      state.me = null;
      return;
    }
    if (state.me.authenticated && account) {
      account.replaceChildren();
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = format(T.hello, { name: state.me.username });
      const form = postForm(logoutPath, T.log_out, "link");
      account.append(who, " ", form);
      showResult(await fetchResult());
    } else if (account) {
      const next = `?next=${encodeURIComponent(location.pathname)}`;
      if (loginLink) loginLink.href = `${loginPath}${next}`;
      const signup = document.getElementById("account-signup");
      if (signup) signup.href = `${signup.pathname}${next}`;
    }
    renderButton();
  }

  function postForm(action, label, cls) {
    const form = document.createElement("form");
    form.method = "post";
    form.action = action;
    form.className = "inline";
    const csrf = document.createElement("input");
    csrf.type = "hidden";
    csrf.name = "csrfmiddlewaretoken";
    csrf.value = state.csrf;
    const submit = document.createElement("button");
    submit.type = "submit";
    submit.className = cls;
    submit.textContent = label;
    form.append(csrf, submit);
    return form;
  }

  // --- buying ------------------------------------------------------------------------------
  function buy() {
    if (button.dataset.roomUrl) {
      location.assign(button.dataset.roomUrl);
      return;
    }
    if (button.disabled) return;
    state.cooldownUntil = performance.now() + COOLDOWN_MS;
    state.retryShown = false;
    renderButton();
    const cooldownTick = setInterval(() => {
      renderButton();
      if (performance.now() >= state.cooldownUntil) clearInterval(cooldownTick);
    }, 250);
    if (state.captchaRequired) return showChallenge(T.captcha_prompt, "info");
    return purchase({});
  }

  async function purchase(captcha) {
    say(T.sending, "info");
    const { response, body } = await post(`/api/activities/${id}/purchase`, { token: state.token, quantity: 1, ...captcha });
    if (!response) {
      hideChallenge(); // the next click on the button brings a new one
      state.retryShown = true;
      return say(T.network, "error");
    }
    handlePurchase(response.status, body.code || "", body);
  }

  async function post(url, payload) {
    try {
      const response = await fetch(url, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          "X-CSRFToken": state.csrf,
          // The captcha's question comes in this language, whatever the browser prefers.
          "Accept-Language": sale.dataset.language,
        },
        body: JSON.stringify(payload),
      });
      return { response, body: await response.json().catch(() => ({})) };
    } catch (e) {
      return { response: null, body: {} };
    }
  }

  // --- the captcha: a fresh one-time challenge for every try ------------------------------
  async function showChallenge(message, kind) {
    hideChallenge();
    const { response, body } = await post(`/api/activities/${id}/captcha`, {});
    if (!response) return say(T.network, "error");
    if (response.status !== 201) return handlePurchase(response.status, body.code || "", body);
    state.captchaRequired = true;
    state.challenge = body.captcha_id;
    captchaQuestion.textContent = body.question;
    captchaAnswer.value = "";
    captchaSubmit.disabled = false;
    captchaForm.hidden = false;
    say(message, kind);
    captchaAnswer.focus();
  }

  function hideChallenge() {
    state.challenge = null;
    captchaForm.hidden = true;
  }

  function answerChallenge(event) {
    event.preventDefault();
    const answer = captchaAnswer.value.trim();
    if (!state.challenge || !answer) return captchaAnswer.focus();
    const captcha = { captcha_id: state.challenge, captcha_answer: answer };
    state.challenge = null; // one purchase per challenge, however often Enter is pressed
    captchaSubmit.disabled = true;
    purchase(captcha);
  }

  function handlePurchase(status, code, body) {
    if (code === "captcha_invalid" || code === "captcha_required") {
      return showChallenge(code === "captcha_invalid" ? T.captcha_invalid : T.captcha_required, "warning");
    }
    hideChallenge();
    state.retryShown = status !== 202; // the cooldown shows only after a failure
    if (status === 202) {
      state.locked = true;
      say(T.queued, "success");
      waitForOrder(0);
      poll(); // the figure left has changed: one unit fewer
    } else if (status === 401) {
      const link = document.createElement("a");
      link.href = `${loginPath}?next=${encodeURIComponent(location.pathname)}`;
      link.textContent = T.log_in;
      say(T.login, "error", link);
    } else if (code === "duplicate") {
      state.locked = true;
      say(T.duplicate, "warning");
      fetchResult().then((r) => r && r.code === "ordered" && showResult(r));
    } else if (code === "sold_out") {
      state.soldOut = true; // until the next flag says units came back
      state.retryShown = false;
      say(T.sold_out, "warning");
      render();
    } else if (status === 429) {
      say(T.rate_limited, "warning");
    } else if (code === "not_eligible") {
      say(T.not_eligible, "error");
    } else if (code === "blacklisted") {
      say(T.blacklisted, "error");
    } else if (code === "not_started") {
      say(T.not_started, "warning");
      poll();
    } else if (code === "ended") {
      state.ended = true;
      say(T.ended, "warning");
      render();
    } else if (code === "bad_token") {
      say(T.bad_token, "warning");
      poll();
    } else if (code === "ticket_required") {
      // This copy of the page predates the sale's waiting room: buy from the room.
      const link = document.createElement("a");
      link.href = button.dataset.roomPath;
      link.textContent = button.dataset.roomText;
      say(button.dataset.roomText, "warning", link);
    } else if (code === "outcome_unknown") {
      state.locked = true; // until the result says whether the purchase went through
      say(T.outcome_unknown, "warning");
      waitForOrder(0);
    } else if (status === 503) {
      say(T.busy, "warning");
    } else if (status === 403) {
      say(T.session, "error"); // a CSRF failure: the session changed since the page loaded
      loadMe();
    } else {
      say(body.detail || T.error, "error");
    }
    renderButton();
  }

  async function fetchResult() {
    try {
      const r = await fetch(`/api/activities/${id}/result`, { cache: "no-store", credentials: "same-origin" });
      return r.ok ? await r.json() : null;
    } catch (e) {
      return null;
    }
  }

  async function waitForOrder(attempt) {
    const result = await fetchResult();
    if (result && result.code === "ordered") return showResult(result);
    if (result && result.code === "failed") return say(T.failed, "error");
    if (result && result.code === "none") {
      // A purchase whose outcome was unknown (outcome_unknown) that did not go through.
      state.locked = false;
      say(T.not_taken, "warning");
      return renderButton();
    }
    setTimeout(() => waitForOrder(attempt + 1), attempt < 20 ? 500 : 2000);
  }

  function showResult(result) {
    if (!result || result.code === "none") return;
    if (result.code === "queued") {
      state.locked = true;
      say(T.queued, "success");
      waitForOrder(0);
      return;
    }
    if (result.code === "failed") return say(T.failed, "error");
    const order = result.order;
    if (!order) return;
    if (order.status === "paid") {
      state.locked = true;
      const link = document.createElement("a");
      link.href = "/orders/";
      link.textContent = T.my_orders;
      say(T.paid, "success", link);
    } else if (order.status === "pending") {
      state.locked = true;
      state.order = order;
      const actions = document.createElement("div");
      actions.className = "actions";
      const pay = postForm(`/orders/${encodeURIComponent(order.order_no)}/pay/`, T.pay, "primary pay");
      // Cancelling asks first, on the order's confirmation page.
      const cancel = document.createElement("button");
      cancel.type = "button";
      cancel.className = "secondary cancel";
      cancel.textContent = T.cancel;
      cancel.addEventListener("click", () => {
        window.location.assign(`/orders/${encodeURIComponent(order.order_no)}/cancel/`);
      });
      actions.append(pay, cancel);
      say("", "success", actions);
      outcome.dataset.order = order.order_no;
      renderOrderTimer();
    }
    renderButton();
  }

  function renderOrderTimer() {
    const order = state.order;
    if (!order || !state.now) return;
    const p = outcome.querySelector("p.msg");
    if (!p) return;
    const left = Date.parse(order.pay_deadline) - state.now();
    if (left <= 0) {
      state.order = null;
      say(T.expired, "warning");
      state.locked = false;
      return;
    }
    p.textContent = format(T.got_it, { time: duration(left, T.days) });
  }

  button.addEventListener("click", buy);
  captchaForm.addEventListener("submit", answerChallenge);
  (function tick() {
    render();
    setTimeout(tick, 200);
  })();
  poll();
  loadMe();
})();
