// opledger operator console: a static page over the observe API (docs/adr/0003-operator-console.md).
// Every value from the server is shown with textContent, never parsed as HTML.
"use strict";

const STATUSES = ["pending", "claimed", "dispatching", "accepted", "succeeded", "failed", "ambiguous",
  "cancelled", "settled", "settlement_blocked"];
const OUTCOMES = ["succeeded", "failed", "ambiguous", "cancelled"];
let nextCursor = null;

const $ = (selector) => document.querySelector(selector);

function say(text, isError) {
  const box = $("#message");
  box.textContent = text;
  box.className = isError ? "error" : "";
}

async function api(path, options) {
  const headers = { "Accept": "application/json" };
  const token = sessionStorage.getItem("opledger-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  if (options && options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({ headers }, options || {}));
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = body && (body.detail || body.title) || response.statusText;
    throw new Error(response.status + " " + detail);
  }
  return body;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function idCell(row, id) {
  const td = cell(row, "", "id");
  const link = document.createElement("a");
  link.href = "#op/" + id;
  link.textContent = id;
  td.appendChild(link);
}

function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 120) return Math.round(seconds) + " s";
  if (seconds < 7200) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return Math.round(seconds / 3600) + " h";
  return Math.round(seconds / 86400) + " d";
}

function fill(tableId, rows, addRow) {
  const body = $(tableId + " tbody");
  body.replaceChildren();
  for (const item of rows) {
    const tr = document.createElement("tr");
    tr.dataset.id = item.operation_id || "";
    addRow(tr, item);
    body.appendChild(tr);
  }
}

function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/);
    if (match) samples.push({ name: match[1], labels: match[2] || "", value: Number(match[3]) });
  }
  return samples;
}

async function showGlance() {
  const samples = parseMetrics(await (await fetch("/metrics")).text());
  const sum = (name, test) => samples.filter((s) => s.name === name && (!test || test(s)))
    .reduce((total, s) => total + s.value, 0);
  const oldest = samples.filter((s) => s.name === "opledger_oldest_pending_age_seconds")
    .reduce((most, s) => Math.max(most, s.value), 0);
  const tiles = [
    ["pending", sum("opledger_operations", (s) => s.labels.includes('status="pending"'))],
    ["on the attention queue", sum("opledger_attention")],
    ["oldest pending", Math.round(oldest) + " s"],
    ["attempts", sum("opledger_attempts_total")],
    ["retries", sum("opledger_retries_total")],
    ["ambiguous", sum("opledger_ambiguous_total")],
  ];
  const glance = $("#glance");
  glance.replaceChildren();
  for (const [label, value] of tiles) {
    const tile = document.createElement("div");
    const number = document.createElement("b");
    number.textContent = String(value);
    tile.append(number, label);
    glance.appendChild(tile);
  }
  return samples;
}

async function showAttention() {
  const rows = await api("/v1/attention?limit=500");
  fill("#attention-table", rows, (tr, r) => {
    idCell(tr, r.operation_id);
    cell(tr, r.integration);
    cell(tr, r.attention);
    cell(tr, age(r.updated_at));
    cell(tr, r.ambiguity_reason || r.failure_category || (r.attention_detail ? JSON.stringify(r.attention_detail) : ""));
  });
}

function operationRow(tr, r) {
  idCell(tr, r.operation_id);
  cell(tr, r.integration);
  cell(tr, r.status);
  cell(tr, r.execution);
  cell(tr, r.attempts + "/" + r.max_attempts);
  cell(tr, r.attention);
  cell(tr, r.created_at);
}

async function showOperations(append) {
  const params = new URLSearchParams();
  for (const [key, value] of new FormData($("#filters"))) if (value) params.set(key, value);
  if (append && nextCursor) params.set("cursor", nextCursor);
  const page = await api("/v1/operations?" + params.toString());
  nextCursor = page.next_cursor;
  $("#more").hidden = !nextCursor;
  if (append) {
    const body = $("#operations-table tbody");
    for (const item of page.items) { const tr = document.createElement("tr"); operationRow(tr, item); body.appendChild(tr); }
  } else {
    fill("#operations-table", page.items, operationRow);
  }
}

async function showApprovals() {
  const page = await api("/v1/approvals?limit=500");
  fill("#approvals-table", page.items, (tr, r) => {
    idCell(tr, r.operation_id);
    cell(tr, r.integration);
    cell(tr, r.tenant);
    cell(tr, r.created_at);
  });
}

async function showMetrics() {
  const samples = (await showGlance()).filter((s) => !s.name.endsWith("_bucket") && !s.name.endsWith("_created"));
  fill("#metrics-table", samples, (tr, s) => { cell(tr, s.name); cell(tr, s.labels); cell(tr, s.value); });
}

async function showOperation(id) {
  const [op, timeline] = await Promise.all([api("/v1/operations/" + id), api("/v1/operations/" + id + "/timeline")]);
  $("#op-id").textContent = op.operation_id;
  const fields = $("#op-fields");
  fields.replaceChildren();
  for (const key of ["status", "execution", "settlement", "outcome", "integration", "tenant", "delivery_mode",
    "approval", "attempts", "max_attempts", "epoch", "attention", "disposition", "remote_id", "trace_id",
    "failure", "ambiguity_reason", "payload", "source", "authority", "settles"]) {
    if (!(key in op)) continue;
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = key;
    const value = op[key];
    dd.textContent = value !== null && typeof value === "object" ? JSON.stringify(value) : String(value);
    fields.append(dt, dd);
  }
  fill("#timeline-table", timeline, (tr, e) => {
    cell(tr, e.version);
    cell(tr, e.at);
    cell(tr, e.event);
    cell(tr, Object.entries(e.details).map(([k, v]) => k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(", "));
  });
}

async function act(path, body, question) {
  const id = $("#op-id").textContent;
  if (!window.confirm(question + "\n\noperation " + id)) return;
  try {
    const result = await api("/v1/operations/" + id + "/" + path, { method: "POST", body: JSON.stringify(body) });
    const events = result.recorded.map((e) => e.event).join(", ") || "nothing new";
    say("recorded " + events + "; status " + result.status, false);
    await showOperation(id);
  } catch (error) {
    say(error.message, true);
  }
}

async function route() {
  const hash = location.hash.slice(1) || "attention";
  const [page, id] = hash.split("/");
  for (const section of document.querySelectorAll(".page")) section.classList.remove("shown");
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("current", link.dataset.page === page);
  const section = $("#page-" + (page === "op" ? "operation" : page));
  if (!section) return;
  section.classList.add("shown");
  try {
    await showGlance();
    if (page === "attention") await showAttention();
    else if (page === "operations") await showOperations(false);
    else if (page === "approvals") await showApprovals();
    else if (page === "metrics") await showMetrics();
    else if (page === "op") await showOperation(id);
    document.body.dataset.loaded = hash;
  } catch (error) {
    say(error.message, true);
    document.body.dataset.loaded = "error";
  }
}

function setUp() {
  for (const name of ["status", "outcome"]) {
    const select = $("#filters select[name=" + name + "]");
    for (const value of name === "status" ? STATUSES : OUTCOMES) {
      const option = document.createElement("option");
      option.textContent = value;
      select.appendChild(option);
    }
  }
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("opledger-token", $("#token").value);
    $("#token").value = "";
    $("#who").textContent = "signed in";
    say("", false);
    route();
  });
  if (sessionStorage.getItem("opledger-token")) $("#who").textContent = "signed in";
  $("#filters").addEventListener("submit", (event) => { event.preventDefault(); showOperations(false).catch((e) => say(e.message, true)); });
  $("#more").addEventListener("click", () => showOperations(true).catch((e) => say(e.message, true)));
  $("#resolve").addEventListener("click", () => act("resolve",
    { resolution: $("#resolution").value, evidence: $("#evidence").value },
    "Resolve as " + $("#resolution").value + " with this evidence?"));
  $("#retry-settlement").addEventListener("click", () => act("retry-settlement",
    { evidence: $("#evidence").value }, "Retry the blocked settlement?"));
  $("#cancel").addEventListener("click", () => act("cancel", { reason: $("#cancel-reason").value }, "Request cancellation?"));
  $("#approve").addEventListener("click", () => act("approve", {}, "Approve this operation?"));
  $("#deny").addEventListener("click", () => act("deny", { reason: $("#deny-reason").value }, "Deny this operation?"));
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", setUp);
