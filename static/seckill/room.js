// The waiting room's page (templates/seckill/room.html): the same bytes for everyone; the
// shopper's place comes from the join call, the room's state from its status (cacheable
// for a second, polled with backoff), the ticket when the room lets the shopper in.
(function () {
  "use strict";
  // id "sale": shop.js finds the page's language there (templates/seckill/room.html).
  const room = document.getElementById("sale");
  if (!room || !room.dataset.room) return;
  const id = room.dataset.activity;
  const T = JSON.parse(document.getElementById("room-strings").textContent);
  const $ = (name) => document.getElementById(name);
  const joinButton = $("join");
  const buyButton = $("buy");
  const outcome = $("outcome");
  const state = { me: null, csrf: "", place: null, preQueue: false, joined: false, status: null,
                  ticket: null, ticketExpires: null, delay: 1000, done: false, lastServing: -1 };

  function format(text, values) {
    return text.replace(/%\((\w+)\)s/g, (m, k) => (values[k] !== undefined ? values[k] : m));
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return null;
    return seconds < 120 ? format(T.seconds, { n: seconds }) : format(T.minutes, { n: Math.ceil(seconds / 60) });
  }
  function say(text, kind, extra) {
    outcome.replaceChildren();
    if (text) {
      const p = document.createElement("p");
      p.className = `msg msg-${kind || "info"}`;
      p.textContent = text;
      outcome.append(p);
    }
    if (extra) outcome.append(extra);
  }
  async function call(method, url, payload) {
    try {
      const init = { method, credentials: "same-origin", headers: { "X-CSRFToken": state.csrf } };
      if (payload !== undefined) {
        init.headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(payload);
      }
      if (method === "GET") init.cache = "no-store";
      const response = await fetch(url, init);
      return { response, body: await response.json().catch(() => ({})) };
    } catch (e) {
      return { response: null, body: {} };
    }
  }

  // --- who -------------------------------------------------------------------------------
  async function loadMe() {
    const { response, body } = await call("GET", "/api/me");
    state.me = response && response.ok ? body : null;
    state.csrf = (state.me && state.me.csrf_token) || "";
    if (state.me && state.me.authenticated) {
      const account = $("account");
      if (account) {
        account.replaceChildren();
        const who = document.createElement("span");
        who.className = "who";
        who.textContent = format(T.hello, { name: state.me.username });
        account.append(who);
      }
      joinButton.disabled = false;
    } else {
      const next = `?next=${encodeURIComponent(location.pathname)}`;
      const login = $("account-login");
      if (login) login.href = `${login.pathname}${next}`; // in the page's language
      joinButton.disabled = true;
      say(T.login_to_join, "info");
    }
  }

  // --- joining ---------------------------------------------------------------------------
  async function join() {
    joinButton.disabled = true;
    joinButton.textContent = T.joining;
    const { response, body } = await call("POST", `/api/activities/${id}/room/join`);
    joinButton.textContent = T.join;
    if (!response) { joinButton.disabled = false; return say(T.network, "error"); }
    if (response.status === 200) {
      state.joined = true;
      state.place = body.place;
      state.preQueue = body.pre_queue;
      joinButton.hidden = true;
      say("", "info");
      showStatus(body.room);
      return;
    }
    joinButton.disabled = false;
    if (response.status === 429) return say(T.rate_limited, "warning");
    if (body.code === "room_not_open") return say(body.detail, "info");
    say(T[body.code] || body.detail || T.error, "error");
  }

  // --- the room ---------------------------------------------------------------------------
  async function poll() {
    if (state.done && state.status) return; // done: the figures shown once, then no more polls
    // The status is the same for everyone and cacheable for a second: the browser's cache may answer.
    let body = null;
    try {
      const r = await fetch(`/api/activities/${id}/room`, { credentials: "omit" });
      body = r.ok ? await r.json() : null;
    } catch (e) {
      body = null;
    }
    if (body) {
      const before = state.status;
      if (state.joined && state.place === null && body.state !== "pre_queue" && body.state !== "not_open") {
        await join(); // the draw is made: the same call answers the place now
      } else {
        showStatus(body);
      }
      const moved = !before || before.now_serving !== body.now_serving || before.state !== body.state;
      const ahead = state.place === null ? null : state.place - body.now_serving - 1;
      // Backoff: quickly while the queue moves or the turn is near, slower while nothing changes.
      state.delay = moved || (ahead !== null && ahead < 50) ? 1000 : Math.min(state.delay * 1.5, 10000);
    } else {
      state.delay = Math.min(state.delay * 2, 15000);
    }
    setTimeout(poll, state.delay);
  }

  function showStatus(s) {
    if (!s) return;
    state.status = s;
    const place = state.place;
    const ahead = place === null ? null : Math.max(0, place - s.now_serving - 1);
    $("room-place").textContent = place === null ? (state.joined ? "…" : "–") : String(place);
    $("room-ahead").textContent = ahead === null ? "–" : String(ahead);
    $("room-serving").textContent = String(s.now_serving);
    const rate = s.measured_rate || s.rate;
    const moving = s.state === "open" || s.state === "pre_queue" || s.state === "drawing";
    const estimate = ahead === null ? null : ahead === 0 ? 0 : moving ? Math.ceil(ahead / Math.max(rate, 0.01)) : null;
    $("room-estimate").textContent = estimate === null ? "–" : duration(estimate);
    $("room-estimate").dataset.seconds = estimate === null ? "" : String(estimate);
    const seed = $("room-seed");
    seed.textContent = s.seed ? format(T.seed, { value: s.seed }) : s.commitment ? format(T.seed_commitment, { value: s.commitment }) : "";
    const line = $("room-state");
    line.dataset.state = s.state;
    // Bought: the order is the news, not the queue (nor the turn that was used).
    if (state.bought) { line.textContent = T.bought_line; line.dataset.state = "bought"; return; }
    if (s.state === "ended") {
      line.textContent = T.ended;
      joinButton.hidden = true;
      buyButton.hidden = true;
      state.done = true;
      return;
    }
    if (s.sold_out || s.state === "closed") {
      line.textContent = T.room_closed;
      buyButton.hidden = true;
      return; // still polled: a cancel may open the room again, in order
    }
    if (s.state === "not_open") { line.textContent = format(T.not_open, { time: "" }); return; }
    if (s.state === "paused") { line.textContent = T.paused; return; }
    if (s.state === "pre_queue") {
      line.textContent = state.joined ? T.pre_queue : format(T.waiting_count, { n: s.waiting });
      return;
    }
    if (s.state === "drawing") { line.textContent = T.drawing; return; }
    if (place !== null && place <= s.now_serving) {
      if (!state.ticket && !state.asking) getTicket();
      return;
    }
    line.textContent = place === null ? format(T.waiting_count, { n: s.waiting }) : format(T.place, { place });
  }

  async function getTicket() {
    state.asking = true;
    const { response, body } = await call("POST", `/api/activities/${id}/room/ticket`);
    state.asking = false;
    if (!response) return;
    if (response.status === 200) {
      state.ticket = body.ticket;
      state.ticketExpires = body.expires_at;
      const until = window.shop.shopTime(body.expires_at);
      $("room-state").textContent = format(T.admitted, { time: until });
      $("room-state").dataset.state = "admitted";
      buyButton.hidden = false;
      buyButton.disabled = false;
      return;
    }
    if (body.code === "not_admitted") return;
    // Sold out is not final: a cancel gives a unit back and the room goes on letting people in.
    if (body.code === "sold_out") { buyButton.hidden = true; return; }
    state.done = body.code === "admission_expired" || body.code === "ticket_used";
    buyButton.hidden = true;
    say(T[body.code] || body.detail || T.error, "warning");
  }

  // --- buying (the purchase endpoint with the ticket), then paying -------------------------
  async function buy() {
    buyButton.disabled = true;
    say(T.sending, "info");
    const flag = await call("GET", `/api/activities/${id}/flag`);
    const token = flag.body && flag.body.token;
    if (!token) { buyButton.disabled = false; return say(T.not_started, "warning"); }
    const { response, body } = await call("POST", `/api/activities/${id}/purchase`, { token, quantity: 1, ticket: state.ticket });
    if (!response) { buyButton.disabled = false; return say(T.network, "error"); }
    if (response.status === 202) {
      state.bought = true;
      state.done = true;
      buyButton.hidden = true;
      showStatus(state.status);
      say(T.queued, "success");
      return waitForOrder(0);
    }
    if (body.code === "outcome_unknown") {
      say(T.outcome_unknown, "warning");
      return waitForOrder(0); // the result says whether it went through
    }
    say(T[body.code] || body.detail || T.error, "error");
  }

  async function waitForOrder(attempt) {
    const { response, body } = await call("GET", `/api/activities/${id}/result`);
    if (response && response.ok && body.code === "ordered" && body.order) return showOrder(body.order);
    if (response && response.ok && body.code === "failed") return say(T.failed, "error");
    if (response && response.ok && body.code === "none") {
      // A purchase whose outcome was unknown (outcome_unknown) that did not go through.
      buyButton.disabled = false;
      return say(T.not_taken, "warning");
    }
    setTimeout(() => waitForOrder(attempt + 1), attempt < 20 ? 500 : 2000);
  }

  function showOrder(order) {
    const actions = document.createElement("div");
    actions.className = "actions";
    const link = document.createElement("a");
    link.href = order.url || `/orders/${encodeURIComponent(order.order_no)}/`;
    link.className = "order-link";
    link.textContent = format(T.see_order, { order: order.order_no });
    actions.append(link);
    outcome.dataset.order = order.order_no;
    if (order.status !== "pending") return say(T.bought_paid, "success", actions);
    const form = document.createElement("form");
    form.method = "post";
    form.action = `/orders/${encodeURIComponent(order.order_no)}/pay/`;
    form.className = "inline";
    const csrf = document.createElement("input");
    csrf.type = "hidden";
    csrf.name = "csrfmiddlewaretoken";
    csrf.value = state.csrf;
    const pay = document.createElement("button");
    pay.type = "submit";
    pay.className = "primary pay";
    pay.textContent = T.pay;
    form.append(csrf, pay);
    actions.append(form);
    say(T.bought, "success", actions);
  }

  // A reload, another tab: the shopper's own standing (place, live order) without joining.
  async function loadStanding() {
    const { response, body } = await call("GET", `/api/activities/${id}/room/me`);
    if (!response || !response.ok) return;
    state.joined = body.joined;
    state.place = body.place;
    state.preQueue = body.pre_queue;
    if (body.order) {
      state.bought = true;
      state.done = true;
      joinButton.hidden = true;
      buyButton.hidden = true;
      $("room-state").textContent = T.bought_line;
      $("room-state").dataset.state = "bought";
      showOrder(body.order);
      return;
    }
    if (body.joined) joinButton.hidden = true;
  }

  joinButton.addEventListener("click", join);
  buyButton.addEventListener("click", buy);
  loadMe().then(async () => {
    // A shopper who joined already (another tab, a reload) sees their place, turn or order.
    if (state.me && state.me.authenticated) await loadStanding();
    poll();
  });
})();
