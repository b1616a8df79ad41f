// Minimal buy button: polls the flag on server time, posts the purchase with the token,
// then polls the result. (The full countdown page comes with the shopper-experience work.)
(function () {
  const root = document.querySelector("[data-activity]");
  if (!root) return;
  const id = root.dataset.activity;
  const button = document.getElementById("buy");
  const countdown = document.getElementById("countdown");
  const outcome = document.getElementById("outcome");
  let token = null;
  let offset = 0; // server time minus client time, in ms

  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function poll() {
    const r = await fetch(`/api/activities/${id}/flag?v=${Math.random().toString(36).slice(2)}`, { cache: "no-store" });
    const flag = await r.json();
    offset = Date.parse(flag.server_time) - Date.now();
    if (flag.ended) { countdown.textContent = "The sale has ended."; button.disabled = true; return; }
    if (flag.started && flag.token) { token = flag.token; countdown.textContent = "On sale now!"; button.disabled = false; return; }
    const left = Math.max(0, Date.parse(flag.start_at) - (Date.now() + offset));
    countdown.textContent = `Starts in ${Math.ceil(left / 1000)} s`;
    setTimeout(poll, left < 5000 ? 500 : 2000);
  }

  async function result() {
    const r = await fetch(`/api/activities/${id}/result`, { cache: "no-store" });
    const body = await r.json();
    if (body.code === "ordered") { outcome.textContent = `Order ${body.order.order_no}: ${body.order.status}. See My orders.`; return; }
    if (body.code === "queued") { setTimeout(result, 500); return; }
    outcome.textContent = body.code;
  }

  button.addEventListener("click", async () => {
    button.disabled = true;
    setTimeout(() => { button.disabled = false; }, 10000);
    const r = await fetch(`/api/activities/${id}/purchase`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify({ token, quantity: 1 }),
    });
    const body = await r.json();
    if (r.status === 202) { outcome.textContent = "You got it! Creating your order…"; result(); }
    else if (r.status === 401) { window.location = `/accounts/login/?next=${location.pathname}`; }
    else { outcome.textContent = body.detail || body.code; }
  });

  poll();
})();
