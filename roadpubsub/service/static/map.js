// The live map: roads from /network.geojson, subscriptions from /subscriptions, messages
// and their deliveries from the /events WebSocket. No tile server: works offline.
"use strict";
const canvas = document.getElementById("map");
const ctx = canvas.getContext("2d");
const statusLine = document.getElementById("status");
const log = document.getElementById("log");
let roads = [], subs = new Map(), box = null, recent = [];

function fit() {
  canvas.width = canvas.clientWidth; canvas.height = canvas.clientHeight;
}
function project(lon, lat) {
  // equirectangular around the network's middle latitude, with a margin
  const k = Math.cos(((box[1] + box[3]) / 2) * Math.PI / 180);
  const w = (box[2] - box[0]) * k, h = box[3] - box[1];
  const s = 0.95 * Math.min(canvas.width / w, canvas.height / h);
  const x0 = (canvas.width - w * s) / 2, y0 = (canvas.height - h * s) / 2;
  return [x0 + (lon - box[0]) * k * s, canvas.height - y0 - (lat - box[1]) * s];
}
function draw() {
  if (!box) return;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1; ctx.beginPath();
  for (const line of roads) {
    line.forEach(([x, y], i) => {
      const p = project(x, y);
      if (i === 0) ctx.moveTo(p[0], p[1]); else ctx.lineTo(p[0], p[1]);
    });
  }
  ctx.stroke();
  ctx.fillStyle = "#1f5fbf";
  for (const s of subs.values()) {
    const p = project(s.lon, s.lat); ctx.fillRect(p[0] - 2, p[1] - 2, 4, 4);
  }
  for (const m of recent) {
    const p = project(m.lon, m.lat);
    ctx.strokeStyle = "#f80"; ctx.lineWidth = 1.5; ctx.beginPath();
    for (const d of m.deliveries) {
      const s = subs.get(d.subscription_id);
      if (!s) continue;
      const q = project(s.lon, s.lat); ctx.moveTo(p[0], p[1]); ctx.lineTo(q[0], q[1]);
    }
    ctx.stroke();
    ctx.fillStyle = "#c00"; ctx.beginPath(); ctx.arc(p[0], p[1], 5, 0, 2 * Math.PI); ctx.fill();
  }
}
async function loadSubscriptions() {
  let after = null;
  for (;;) {
    const q = after === null ? "" : `&after=${after}`;
    const page = (await (await fetch(`/subscriptions?limit=5000${q}`)).json()).subscriptions;
    if (!page.length) return;
    for (const s of page) subs.set(s.id, s);
    after = page[page.length - 1].id;
  }
}
function connect() {
  const ws = new WebSocket(`ws://${location.host}/events`);
  ws.onopen = () => { statusLine.textContent = `live: ${subs.size} subscriptions`; };
  ws.onclose = () => { statusLine.textContent = "disconnected; retrying"; setTimeout(connect, 1000); };
  ws.onmessage = (ev) => {
    const e = JSON.parse(ev.data);
    if (e.type !== "message") return;
    recent.push(e);
    if (recent.length > 50) recent.shift();
    const li = document.createElement("li");
    li.className = "message";
    li.dataset.id = e.id;
    li.dataset.deliveries = e.deliveries.length;
    li.textContent = `message ${e.id}: ${e.deliveries.length} deliveries`;
    log.prepend(li);
    draw();
  };
}
async function main() {
  fit();
  const gj = await (await fetch("/network.geojson")).json();
  roads = gj.features[0].geometry.coordinates;
  box = [Infinity, Infinity, -Infinity, -Infinity];
  for (const seg of roads) for (const [x, y] of seg) {
    box[0] = Math.min(box[0], x); box[1] = Math.min(box[1], y);
    box[2] = Math.max(box[2], x); box[3] = Math.max(box[3], y);
  }
  await loadSubscriptions();
  draw();
  connect();
  window.addEventListener("resize", () => { fit(); draw(); });
}
main();
