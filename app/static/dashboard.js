/* Switchyard dashboard: polls the worker's read-only JSON API and draws it with uPlot.
 * Plain browser JavaScript, no build step. Every text from the API goes in with textContent,
 * never as markup: device ids and op kinds come from Kafka messages, not from us. */
"use strict";

const REFRESH_MS = 2000;
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
                 "#ca8a04", "#db2777", "#4b5563", "#65a30d"];
const HISTORY_S = 300;      // the x axis: the last five minutes (windows expire after that)
const MIN_SPAN_S = 60;      // ... but never narrower than a minute
const charts = {};          // chart id -> {plot, key}
let updates = 0;
let xWindow = [Date.now() / 1000 - HISTORY_S, Date.now() / 1000];

const colours = new Map();  // device class -> colour, in order of first appearance
/** A stable, distinct colour per device class: a class keeps its colour across refreshes. */
function colour(name) {
  if (!colours.has(name)) colours.set(name, PALETTE[colours.size % PALETTE.length]);
  return colours.get(name);
}

function fmt(v, digits = 3) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  if (v !== 0 && Math.abs(v) < 0.001) return v.toExponential(1);
  return Number(v.toPrecision(digits)).toString();
}

function pct(v) { return v === null || v === undefined ? "–" : fmt(v, 3) + " %"; }

async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store"});
  if (!response.ok) throw new Error(path + " answered " + response.status);
  return response.json();
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function fillTable(id, rows, render) {
  const body = document.querySelector("#" + id + " tbody");
  const fresh = document.createElement("tbody");
  for (const item of rows) {
    const tr = document.createElement("tr");
    render(tr, item);
    fresh.appendChild(tr);
  }
  body.replaceWith(fresh);
}

/** Align per-class series on the union of their times; missing points are null (gaps). */
function align(perClass, pick) {
  const times = new Set();
  for (const rows of Object.values(perClass)) for (const r of rows) times.add(r.t);
  const t = [...times].sort((a, b) => a - b);
  const out = {t, series: {}};
  for (const [name, rows] of Object.entries(perClass)) {
    const at = new Map(rows.map((r) => [r.t, r]));
    out.series[name] = t.map((x) => (at.has(x) ? pick(at.get(x), x) : null));
  }
  return out;
}

/** Draw (or update) a line chart. lines: [{label, values, stroke, dash}]. */
function lineChart(id, x, lines, opts = {}) {
  const el = document.getElementById(id);
  const usable = lines.map((l) => ({...l, values: l.values.map((v) =>
    v === null || !isFinite(v) || (opts.log && v <= 0) ? null : v)}));
  const hasData = x.length > 0 && usable.some((l) => l.values.some((v) => v !== null));
  if (!hasData) {
    if (charts[id]) { charts[id].plot.destroy(); delete charts[id]; }
    if (!el.querySelector(".empty")) {
      el.textContent = "";
      const p = document.createElement("div");
      p.className = "empty";
      p.textContent = "no data yet";
      el.appendChild(p);
    }
    return;
  }
  const key = usable.map((l) => l.label).join("|");
  const data = [x, ...usable.map((l) => l.values)];
  const existing = charts[id];
  if (existing && existing.key === key) { existing.plot.setData(data); return; }
  if (existing) existing.plot.destroy();
  el.textContent = "";
  const plot = new uPlot({
    width: Math.max(300, el.clientWidth),
    height: 250,
    // A fixed rolling range: auto-ranging one point spans years and makes the axis unreadable.
    scales: {x: {time: true, range: () => xWindow}, y: opts.log ? {distr: 3, log: 10} : {range: opts.range}},
    series: [{}, ...usable.map((l) => ({label: l.label, stroke: l.stroke, width: 2,
                                         dash: l.dash, spanGaps: true, points: {size: 4},
                                         value: (u, v) => fmt(v)}))],
    axes: [{}, {label: opts.yLabel || "", size: 64, values: (u, ticks) => ticks.map((v) => fmt(v, 2))}],
    legend: {live: false},
  }, data, el);
  charts[id] = {plot, key};
}

function renderTiles(health, devices, dash) {
  const live = devices.filter((d) => d.live).length;
  document.getElementById("t-live").textContent = live + " / " + devices.length;
  const totals = dash.totals || {};
  document.getElementById("t-decisions").textContent = fmt(totals.decisions || 0, 9);
  const results = totals.results || {};
  document.getElementById("t-results").textContent =
    fmt(results.ok || 0, 9) + " / " + fmt(results.error || 0, 9);
  document.getElementById("t-inflight").textContent = fmt(dash.inflight || 0, 9);
  document.getElementById("t-deadletters").textContent = fmt(totals.deadletters || 0, 9);
  // Throughput: executions in the newest complete window of every class, per second.
  let perS = 0;
  for (const rows of Object.values(dash.window_series || {})) {
    if (rows.length > 1) perS += rows[rows.length - 2].per_s;
    else if (rows.length === 1) perS += rows[0].per_s;
  }
  document.getElementById("t-throughput").textContent = fmt(perS, 3);
  const status = document.getElementById("status");
  status.textContent = health.ready ? "worker ready" : "worker " + health.status;
  status.className = "pill " + (health.ready ? "ok" : "bad");
}

function renderDevices(devices) {
  fillTable("devices", devices, (tr, d) => {
    const id = cell(tr, d.device_id);
    if (d.simulated) {
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = "simulated";
      id.appendChild(tag);
    }
    cell(tr, d.device_class);
    cell(tr, d.runtime + " · " + d.device);
    cell(tr, d.health, "health " + d.health);
    cell(tr, fmt(d.queue_depth, 6));
    cell(tr, fmt(d.in_hand, 6));
    const modelled = d.power_model ? "modelled (" + d.power_model + ")" : "not measured";
    cell(tr, d.power_w === null || d.power_w === undefined ? modelled : fmt(d.power_w));
    const threads = d.threads === null || d.threads === undefined ? "–" : String(d.threads);
    cell(tr, Array.isArray(d.cpus) ? `${threads} on cpu ${d.cpus.join(",")}` : threads);
    // A remote class: the link it declares (simulated: its executor waits the link's time).
    cell(tr, d.link ? fmt(d.link.rtt_ms) + " ms · " + fmt(d.link.bandwidth_mbit_s) + " Mbit/s"
      + (d.simulated ? " (simulated)" : " (waited)") : "local");
    cell(tr, d.price_per_hour === null || d.price_per_hour === undefined ? "–" : fmt(d.price_per_hour));
    cell(tr, d.seen_ms_ago === null ? "never" : fmt(d.seen_ms_ago / 1000, 3) + " s ago");
  });
}

function renderCharts(dash) {
  const now = (dash.time_ms || Date.now()) / 1000;
  // Five minutes at most; less while there is less history, so a young system is readable.
  let earliest = now;
  for (const rows of Object.values(dash.window_series || {})) for (const r of rows) earliest = Math.min(earliest, r.t);
  for (const t of (dash.decision_series || {}).t || []) earliest = Math.min(earliest, t);
  xWindow = [Math.max(now - HISTORY_S, Math.min(earliest - 5, now - MIN_SPAN_S)), now + 2];
  const perClass = dash.window_series || {};
  const names = Object.keys(perClass).sort();
  // Colours are handed out in sorted order of every class seen, so charts agree.
  [...names, ...((dash.decision_series || {}).classes || [])].sort().forEach(colour);
  const totals = {};
  for (const rows of Object.values(perClass)) for (const r of rows) totals[r.t] = (totals[r.t] || 0) + r.count;
  const share = align(perClass, (r, t) => (totals[t] ? (100 * r.count) / totals[t] : null));
  lineChart("chart-share", share.t, names.map((n) => ({label: n, values: share.series[n], stroke: colour(n)})),
            {yLabel: "%", range: [0, 100]});
  const thr = align(perClass, (r) => r.per_s);
  lineChart("chart-throughput", thr.t, names.map((n) => ({label: n, values: thr.series[n], stroke: colour(n)})),
            {yLabel: "per s"});
  const p95 = align(perClass, (r) => r.p95_ms);
  const p50 = align(perClass, (r) => r.p50_ms);
  lineChart("chart-percentiles", p95.t, names.flatMap((n) => [
    {label: n + " p95", values: p95.series[n], stroke: colour(n)},
    {label: n + " p50", values: p50.series[n], stroke: colour(n), dash: [6, 4]}]),
  {yLabel: "ms", log: true});

  const ds = dash.decision_series || {t: [], classes: []};
  lineChart("chart-error", ds.t, ds.classes.map((n) => ({label: n, values: ds.error_pct[n], stroke: colour(n)})),
            {yLabel: "%", log: true});
  lineChart("chart-latency", ds.t, ds.classes.flatMap((n) => [
    {label: n + " measured", values: ds.measured_ms[n], stroke: colour(n)},
    {label: n + " predicted", values: ds.predicted_ms[n], stroke: colour(n), dash: [6, 4]}]),
  {yLabel: "ms", log: true});
}

function renderWindows(windows) {
  const rows = windows.filter((w) => w.window === "tumbling");
  fillTable("windows", rows, (tr, w) => {
    cell(tr, w.device_class); cell(tr, w.op_kind); cell(tr, fmt(w.count, 9));
    cell(tr, fmt(w.errors, 9)); cell(tr, fmt(w.p50_ms)); cell(tr, fmt(w.p95_ms)); cell(tr, fmt(w.p99_ms));
    cell(tr, w.energy_j_mean === null || w.energy_j_mean === undefined ? "not measured" : fmt(w.energy_j_mean));
  });
}

function renderModels(models, dash) {
  const recent = dash.model_error || {};
  fillTable("models", models, (tr, m) => {
    const err = m.error || {};
    const unc = m.uncertainty || {};
    const shift = (m.largest_shifts || [])[0];
    cell(tr, m.device_class); cell(tr, fmt(m.samples, 9)); cell(tr, fmt(m.version, 9));
    cell(tr, pct(err.median_ape)); cell(tr, pct(err.p90_ape));
    cell(tr, pct((recent[m.device_class] || {}).error_pct_p50));
    cell(tr, unc.learned_fraction === undefined ? "–" : pct(100 * unc.learned_fraction));
    cell(tr, fmt(unc.noise_std_log)); cell(tr, fmt(unc.drift_events, 9));
    cell(tr, shift ? shift.feature + " " + fmt(shift.prior_mean) + " → " + fmt(shift.mean) : "–");
    cell(tr, fmt(m.energy_samples || 0, 9));
    const t = m.transfer;
    cell(tr, t ? fmt(t.a_ms) + " ms + " + fmt(t.b_ms_per_mb) + " ms/MB (" + fmt(t.rows, 9) + ")" : "–");
  });
}

function renderDecisions(decisions) {
  fillTable("decisions", decisions.slice(0, 15), (tr, d) => {
    cell(tr, d.id); cell(tr, d.device_class);
    cell(tr, d.variant ? d.variant.precision + " · " + d.variant.mode : "–");
    cell(tr, d.reason); cell(tr, fmt(d.predicted_ms));
    cell(tr, d.predicted_transfer_ms ? fmt(d.predicted_transfer_ms) : "–");
    cell(tr, d.predicted_cost ? d.predicted_cost.toPrecision(2) : "–");
    cell(tr, fmt(d.measured_ms));
    cell(tr, d.status || "in flight");
  });
}

async function refresh() {
  const banner = document.getElementById("banner");
  try {
    const [health, devices, models, windows, decisions, dash] = await Promise.all([
      getJSON("/api/health"), getJSON("/api/devices"), getJSON("/api/models"),
      getJSON("/api/windows"), getJSON("/api/decisions?limit=15"), getJSON("/api/dashboard")]);
    renderTiles(health, devices.devices, dash);
    renderDevices(devices.devices);
    renderCharts(dash);
    renderWindows(windows.windows);
    renderModels(models.models, dash);
    renderDecisions(decisions.decisions);
    const missing = [...(windows.unreachable || []), ...(dash.unreachable || [])];
    banner.hidden = missing.length === 0;
    banner.textContent = missing.length ? "partial answer: no reply from " + missing.join(", ") : "";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    updates += 1;
    document.body.dataset.updates = String(updates);
  } catch (err) {
    // The worker restarting is normal: say so on the page instead of throwing.
    banner.hidden = false;
    banner.textContent = "the worker does not answer (" + err.message + "); retrying";
    const status = document.getElementById("status");
    status.textContent = "no answer";
    status.className = "pill bad";
  }
}

window.addEventListener("resize", () => {
  for (const [id, c] of Object.entries(charts)) {
    c.plot.setSize({width: Math.max(300, document.getElementById(id).clientWidth), height: 250});
  }
});
refresh();
setInterval(refresh, REFRESH_MS);
