// opledger console: the metrics page as charts drawn in SVG from /metrics, sampled by the page
// while it is open (issue 31 item 5). No raw rows; no library (SVG elements built with the DOM,
// so the page stays under its Content-Security-Policy).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const WINDOW_SECONDS = 15 * 60; // how far back the sampled charts reach
const HISTOGRAMS = [
  ["opledger_claim_latency_seconds", "intent to claim"],
  ["opledger_dispatch_latency_seconds", "attempt to outcome"],
  ["opledger_accepted_to_terminal_seconds", "accepted to outcome"],
  ["opledger_settlement_latency_seconds", "outcome to settled"],
];
const QUANTILES = [0.5, 0.9, 0.99];
const ACTIVE = ["pending", "claimed", "dispatching", "accepted", "ambiguous", "settlement_blocked"];
const history = []; // [{at: ms, samples}] oldest first
let sampler = null;

function sampleSeconds() {
  const asked = Number(new URLSearchParams(location.search).get("sample"));
  return asked >= 1 && asked <= 60 ? asked : 5;
}

// A ?sample= the page cannot use is said, not silently replaced by the default.
function sampleProblem() {
  const raw = new URLSearchParams(location.search).get("sample");
  if (raw === null || sampleSeconds() === Number(raw)) return null;
  return "?sample=" + raw + " is not a number of seconds from 1 to 60: sampling every 5 s.";
}

function svg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, String(value));
  for (const child of children) if (child) node.append(typeof child === "string" ? document.createTextNode(child) : child);
  return node;
}

function total(samples, name, test) {
  return samples.filter((s) => s.name === name && (!test || test(s))).reduce((sum, s) => sum + s.value, 0);
}

function byLabel(samples, name, label) {
  const out = {};
  for (const s of samples) if (s.name === name) out[s.labels[label]] = (out[s.labels[label]] || 0) + s.value;
  return out;
}

// The q-quantile of a Prometheus histogram summed over its label sets, interpolated linearly
// inside the bucket it falls in (as PromQL's histogram_quantile); null without observations.
function quantile(samples, name, q) {
  const buckets = {};
  for (const s of samples) {
    if (s.name !== name + "_bucket") continue;
    buckets[s.labels.le] = (buckets[s.labels.le] || 0) + s.value;
  }
  const bounds = Object.keys(buckets).map((le) => [le === "+Inf" ? Infinity : Number(le), buckets[le]])
    .sort((a, b) => a[0] - b[0]);
  if (!bounds.length) return null;
  const count = bounds[bounds.length - 1][1];
  if (!count) return null;
  const rank = q * count;
  let lower = 0;
  let below = 0;
  for (const [upper, cumulative] of bounds) {
    if (cumulative >= rank) {
      if (upper === Infinity) return lower;
      const inside = cumulative - below;
      return inside ? lower + (upper - lower) * ((rank - below) / inside) : upper;
    }
    lower = upper;
    below = cumulative;
  }
  return lower;
}

// The smallest 1, 2 or 5 times a power of ten at or above value: a round top for an axis.
function roundUp(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= value);
}

function tick(value) {
  if (Math.abs(value) >= 1000) return (value / 1000).toFixed(1).replace(/\.0$/, "") + "k";
  if (Number.isInteger(value)) return String(value);
  return value < 10 ? value.toFixed(2).replace(/\.?0+$/, "") : value.toFixed(0);
}

function draw(figureId, chart, note) {
  const figure = $("#" + figureId);
  for (const old of figure.querySelectorAll("svg, .legend, .note")) old.remove();
  figure.append(chart);
  if (note) figure.append(el("p", { className: "note", text: note }));
  figure.dataset.rendered = "yes";
}

// Horizontal bars: [{label, value, tone}]; each bar names its value.
function bars(items, format) {
  const width = 460;
  const row = 24;
  const left = 150;
  const most = Math.max(1, ...items.map((i) => i.value || 0));
  const chart = svg("svg", { class: "chart bars", viewBox: `0 0 ${width} ${Math.max(1, items.length) * row + 8}`,
    role: "img" });
  items.forEach((item, i) => {
    const y = 4 + i * row;
    const length = Math.max(1, ((item.value || 0) / most) * (width - left - 70));
    chart.append(svg("text", { x: left - 6, y: y + 15, "text-anchor": "end", class: "axis" }, item.label),
      svg("rect", { x: left, y: y + 3, width: length, height: row - 8, class: "bar " + (item.tone || ""),
        "data-value": item.value }),
      svg("text", { x: left + length + 5, y: y + 15, class: "value" }, format(item.value)));
  });
  if (!items.length) chart.append(svg("text", { x: 10, y: 20, class: "axis" }, "nothing yet"));
  return chart;
}

// Lines over time: [{name, points: [[ms, value]]}], with a legend giving each line's last value.
function lines(series, format) {
  const width = 460;
  const height = 180;
  const pad = { left: 44, right: 10, top: 10, bottom: 22 };
  const all = series.flatMap((s) => s.points);
  const chart = svg("svg", { class: "chart lines", viewBox: `0 0 ${width} ${height}`, role: "img" });
  const now = all.length ? Math.max(...all.map((p) => p[0])) : Date.now();
  const first = all.length ? Math.min(...all.map((p) => p[0])) : now;
  const span = Math.max(10000, now - first);
  const top = roundUp(Math.max(1, ...all.map((p) => p[1])) * 1.05);
  const x = (t) => pad.left + ((t - (now - span)) / span) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / top) * (height - pad.top - pad.bottom);
  for (const v of [0, top / 2, top]) {
    chart.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), class: "grid" }),
      svg("text", { x: pad.left - 4, y: y(v) + 4, "text-anchor": "end", class: "axis" }, tick(v)));
  }
  chart.append(svg("text", { x: pad.left, y: height - 6, class: "axis" }, "-" + seconds(span / 1000)),
    svg("text", { x: width - pad.right, y: height - 6, "text-anchor": "end", class: "axis" }, "now"));
  const legend = el("ul", { className: "legend" });
  series.forEach((s, i) => {
    // A status or outcome keeps its colour from the badges; anything else takes the next one.
    const colour = TONES[s.name] && TONES[s.name] !== "active" ? "c-" + TONES[s.name] : "s" + (i % 6);
    const d = s.points.map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
    if (s.points.length > 1) chart.append(svg("path", { d, class: "line " + colour, "data-points": s.points.length }));
    for (const p of s.points.slice(-1)) chart.append(svg("circle", { cx: x(p[0]), cy: y(p[1]), r: 2.5, class: "dot " + colour }));
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    legend.append(el("li", { className: colour }, words(s.name) + " " + format(last)));
  });
  const wrap = el("div", { className: "lines-wrap" });
  wrap.append(chart, legend);
  return wrap;
}

function throughputSeries() {
  const outcomes = new Set(history.flatMap((h) => Object.keys(byLabel(h.samples, "opledger_outcomes_total", "outcome"))));
  return [...outcomes].sort().map((outcome) => {
    const points = [];
    for (let i = 1; i < history.length; i++) {
      const minutes = (history[i].at - history[i - 1].at) / 60000;
      const now = byLabel(history[i].samples, "opledger_outcomes_total", "outcome")[outcome] || 0;
      const before = byLabel(history[i - 1].samples, "opledger_outcomes_total", "outcome")[outcome] || 0;
      points.push([history[i].at, Math.max(0, now - before) / minutes]); // a counter reset is not negative work
    }
    return { name: outcome, points };
  });
}

function renderCharts() {
  const latest = history[history.length - 1].samples;
  const outcomes = byLabel(latest, "opledger_outcomes_total", "outcome");
  draw("chart-outcomes", bars(Object.entries(outcomes).sort().map(([label, value]) =>
    ({ label: words(label), value, tone: TONES[label] })), tick));
  draw("chart-throughput", lines(throughputSeries(), (v) => tick(v) + "/min"),
    history.length < 2 ? "Rates appear from the second sample on." : "");
  const present = new Set(history.flatMap((h) => Object.keys(byLabel(h.samples, "opledger_operations", "status"))));
  const statuses = ACTIVE.filter((s) => present.has(s) || s === "pending");
  draw("chart-depth", lines(statuses.map((status) => ({ name: status,
    points: history.map((h) => [h.at, total(h.samples, "opledger_operations", (s) => s.labels.status === status)]) })), tick));
  draw("chart-oldest", lines([{ name: "oldest pending", points: history.map((h) => [h.at,
    Math.max(0, ...h.samples.filter((s) => s.name === "opledger_oldest_pending_age_seconds").map((s) => s.value))]) }],
  (v) => seconds(v) || "0 s"));
  const latency = [];
  for (const [name, label] of HISTOGRAMS) {
    for (const q of QUANTILES) {
      const value = quantile(latest, name, q);
      if (value !== null) latency.push({ label: label + " p" + Math.round(q * 100), value, tone: "q" + Math.round(q * 100) });
    }
  }
  draw("chart-latency", bars(latency, (v) => seconds(v) || "0 s"), latency.length ? "" : "No observations yet.");
  const attention = byLabel(latest, "opledger_attention", "reason");
  draw("chart-attention", bars(Object.entries(attention).filter(([, v]) => v > 0).sort()
    .map(([reason, value]) => ({ label: words(reason), value, tone: "warn" })), tick));
}

async function takeSample() {
  const samples = await fetchMetrics();
  const at = Date.now();
  history.push({ at, samples });
  while (history.length && history[0].at < at - WINDOW_SECONDS * 1000) history.shift();
  showGlance(samples);
  renderCharts();
  $("#sampling").textContent = "Sampled from /metrics every " + seconds(sampleSeconds()) + " while this page is open; " +
    history.length + " sample" + (history.length === 1 ? "" : "s") + " over the last " +
    seconds((at - history[0].at) / 1000 || 0) + " (up to " + seconds(WINDOW_SECONDS) + ").";
  document.body.dataset.samples = String(history.length);
}

async function showMetrics() {
  await takeSample();
  const problem = sampleProblem();
  if (problem) say("metrics", problem, false);
  if (sampler === null) {
    sampler = setInterval(() => takeSample().catch((error) => say("metrics", error.message, true)),
      sampleSeconds() * 1000);
  }
}

function stopSampling() {
  if (sampler !== null) clearInterval(sampler);
  sampler = null;
}
