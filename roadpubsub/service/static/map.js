// The live map: roads from /network.geojson, subscriptions from /subscriptions, messages
// and their deliveries from the /events WebSocket. No tile server: works offline.
// The token (an admin's: /events carries every message) is never in the page: it comes
// from the URL fragment (/#token=TOKEN, which a browser never sends to the server; taken
// out of the address bar at once) or the form, and is kept in sessionStorage (this tab).
"use strict";
const KEY = "roadpubsub-token";
function takeFragment() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (!m) return false;
  sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
  return true;
}
takeFragment();
// a fragment typed on an open page does not reload it: start again with the token
window.addEventListener("hashchange", () => { if (takeFragment()) location.reload(); });
const token = () => sessionStorage.getItem(KEY);
class NeedToken extends Error {}
async function api(path) {
  const t = token();
  const r = await fetch(path, { headers: t ? { Authorization: `Bearer ${t}` } : {} });
  if (r.status === 401 || r.status === 403) throw new NeedToken(`${path}: ${r.status}`);
  return r.json();
}
function askToken(why) {
  statusLine.textContent = why;
  const form = document.getElementById("login");
  form.hidden = false;
  form.onsubmit = (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("token").value.trim());
    location.reload();
  };
}
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
// A piece of a route or area (issue 32): the part of an edge's polyline between two
// offsets, placed by their share of the edge (lengths measured on the polyline here: the
// map draws pixels; GET /subscriptions/ID has the exact pieces).
function piece(line, seg) {
  if (line.length < 2) return line;
  const k = Math.cos(line[0][1] * Math.PI / 180);
  const cum = [0];
  for (let i = 1; i < line.length; i++) {
    cum.push(cum[i - 1] + Math.hypot((line[i][0] - line[i - 1][0]) * k, line[i][1] - line[i - 1][1]));
  }
  // metres of the edge: its polyline's, about 111.2 km per degree (drawing precision)
  const total = cum[cum.length - 1], len = Math.max(total * 111200, 1e-9);
  const at = (f) => {
    const d = Math.min(Math.max(f, 0), 1) * total;
    let i = 1;
    while (i < line.length - 1 && cum[i] < d) i++;
    const t = cum[i] > cum[i - 1] ? (d - cum[i - 1]) / (cum[i] - cum[i - 1]) : 0;
    return [line[i - 1][0] + t * (line[i][0] - line[i - 1][0]),
            line[i - 1][1] + t * (line[i][1] - line[i - 1][1])];
  };
  const a = seg.start_m / len, b = seg.end_m / len;
  const out = [at(a)];
  for (let i = 1; i < line.length - 1; i++) if (cum[i] > a * total && cum[i] < b * total) out.push(line[i]);
  out.push(at(b));
  return out;
}
function setLines(s) {  // the polylines of a route or area subscription, lon/lat
  if (!s._lines) {
    s._lines = s.geometry.segments.map((g) => piece(roads[g.edge], g));
    s.lon = s._lines[0][0][0]; s.lat = s._lines[0][0][1];  // where deliveries point
  }
  return s._lines;
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
  for (const s of subs.values()) {
    if (!s.geometry) continue;
    ctx.strokeStyle = s.geometry.kind === "area" ? "#8e44ad" : "#2a9d2a";
    ctx.lineWidth = 4; ctx.beginPath();
    for (const line of setLines(s)) {
      line.forEach(([x, y], i) => {
        const p = project(x, y);
        if (i === 0) ctx.moveTo(p[0], p[1]); else ctx.lineTo(p[0], p[1]);
      });
    }
    ctx.stroke();
  }
  ctx.fillStyle = "#1f5fbf";
  for (const s of subs.values()) {
    if (s.geometry) continue;
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
    const page = (await api(`/subscriptions?limit=5000${q}`)).subscriptions;
    if (!page.length) return;
    for (const s of page) subs.set(s.id, s);
    after = page[page.length - 1].id;
  }
}
function connect() {
  const t = token();  // browsers cannot set headers on a WebSocket: the subprotocols
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/events`, t ? ["bearer", t] : []);
  let opened = false;
  const sets = [...subs.values()].filter((s) => s.geometry);
  const routes = sets.filter((s) => s.geometry.kind === "route").length;
  const more = sets.length ? `, ${routes} on routes, ${sets.length - routes} on areas` : "";
  ws.onopen = () => { opened = true; statusLine.textContent = `live: ${subs.size} subscriptions${more}`; };
  ws.onclose = () => {
    if (!opened) { askToken("the /events stream needs an admin token"); return; }
    statusLine.textContent = "disconnected; retrying"; setTimeout(connect, 1000);
  };
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
  let gj;
  try {
    gj = await api("/network.geojson");
  } catch (e) {
    if (e instanceof NeedToken) { askToken("this service needs a token (an admin's)"); return; }
    throw e;
  }
  roads = gj.features[0].geometry.coordinates;
  box = [Infinity, Infinity, -Infinity, -Infinity];
  for (const seg of roads) for (const [x, y] of seg) {
    box[0] = Math.min(box[0], x); box[1] = Math.min(box[1], y);
    box[2] = Math.max(box[2], x); box[3] = Math.max(box[3], y);
  }
  try {
    await loadSubscriptions();
  } catch (e) {
    if (e instanceof NeedToken) { askToken("this token may not see every subscription"); return; }
    throw e;
  }
  draw();
  connect();
  window.addEventListener("resize", () => { fit(); draw(); });
}
main();
