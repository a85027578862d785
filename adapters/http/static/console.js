// opledger operator console: a static page over the observe API (docs/adr/0003-operator-console.md).
// The session, the routing between pages, and the list pages. Every value from the server is
// shown with textContent, never parsed as HTML.
"use strict";

const STATUSES = ["pending", "claimed", "dispatching", "accepted", "succeeded", "failed", "ambiguous",
  "cancelled", "settled", "settlement_blocked"];
const OUTCOMES = ["succeeded", "failed", "ambiguous", "cancelled"];
const TOKEN_KEY = "opledger-token";
let nextCursor = null;
let signedIn = null; // /v1/me of the token in this tab, or null

class ApiError extends Error {
  constructor(status, detail) {
    super(status + " " + detail);
    this.status = status;
  }
}

async function api(path, options) {
  const headers = { "Accept": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (options && options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({ headers }, options || {}));
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && token) refused();
    throw new ApiError(response.status, body && (body.detail || body.title) || response.statusText);
  }
  return body;
}

// ------------------------------------------------------------------------ the session

function showSession(state) {
  document.body.dataset.signedIn = state;
  const who = $("#who");
  who.replaceChildren();
  who.className = state;
  if (state === "yes") {
    who.append(el("span", { className: "principal", text: signedIn.principal }));
    for (const role of signedIn.roles) who.append(" ", badge(role, "role"));
    if (!signedIn.writable) who.append(" ", badge("read-only server", "warn"));
  } else {
    who.textContent = state === "refused" ? "token refused: not signed in" : "not signed in";
  }
  $("#login").hidden = state === "yes";
  $("#sign-out").hidden = state !== "yes";
}

function refused() {
  sessionStorage.removeItem(TOKEN_KEY);
  signedIn = null;
  forget();
  showSession("refused");
}

// Without a session no page may keep what an earlier token was shown: every list, the
// operation's page and the "load more" cursor are emptied (the metrics page reads the public
// /metrics and is redrawn on its next visit).
function forget() {
  for (const body of document.querySelectorAll(".page tbody")) body.replaceChildren();
  for (const id of ["#op-id", "#op-badges", "#phases", "#op-cards", "#actions"]) $(id).replaceChildren();
  for (const empty of document.querySelectorAll(".page .empty")) empty.hidden = true;
  nextCursor = null;
  $("#more").hidden = true;
}

async function checkSession() {
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    signedIn = null;
    if (document.body.dataset.signedIn !== "refused") showSession("no");
    return;
  }
  try {
    signedIn = await api("/v1/me");
    showSession("yes");
  } catch (error) {
    if (error.status !== 401) throw error;
  }
}

// ------------------------------------------------------------------------ list pages

function idCell(id) {
  return el("td", { className: "id" }, el("a", { href: "#op/" + id, text: id }));
}

function fill(page, tableId, rows, addRow) {
  const body = $(tableId + " tbody");
  body.replaceChildren();
  for (const item of rows) {
    const tr = el("tr", { "data-id": item.operation_id || "" });
    addRow(tr, item);
    body.appendChild(tr);
  }
  $("#page-" + page + " .empty").hidden = rows.length > 0;
}

function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

async function fetchMetrics() {
  const response = await fetch("/metrics");
  if (!response.ok) throw new ApiError(response.status, "/metrics did not answer");
  return parseMetrics(await response.text());
}

function showGlance(samples) {
  const sum = (name, test) => samples.filter((s) => s.name === name && (!test || test(s)))
    .reduce((total, s) => total + s.value, 0);
  const oldest = samples.filter((s) => s.name === "opledger_oldest_pending_age_seconds")
    .reduce((most, s) => Math.max(most, s.value), 0);
  const tiles = [
    ["pending", sum("opledger_operations", (s) => s.labels.status === "pending")],
    // The queue holds operations and the keyed commands whose receipt recovery gave up on.
    ["on the attention queue", sum("opledger_attention") + sum("opledger_receipts_stuck")],
    ["oldest pending", seconds(oldest) || "0 s"],
    // Counters since the store began, not current counts: said so, beside the counts above.
    ["attempts, all time", sum("opledger_attempts_total")],
    ["retries, all time", sum("opledger_retries_total")],
    ["ambiguous, all time", sum("opledger_ambiguous_total")],
  ];
  $("#glance").replaceChildren(...tiles.map(([label, value]) => el("div", {}, el("b", { text: value }), label)));
}

function detailText(row) {
  if (row.ambiguity_reason) return words(row.ambiguity_reason);
  if (row.failure_category) return words(row.failure_category);
  return row.attention_detail ? plain(row.attention_detail) : "";
}

async function showAttention() {
  const rows = await api("/v1/attention?limit=500");
  fill("attention", "#attention-table", rows, (tr, r) => {
    // Any reason the API names is shown as it names it; an entry that is not an operation (a
    // receipt, say) shows its own id without a link.
    const subject = r.operation_id ? idCell(r.operation_id) : el("td", { className: "id", text: r.id || r.key || "" });
    tr.append(subject, el("td", { text: r.integration || r.command || "" }),
      el("td", {}, badge(r.attention || r.reason || "attention", "warn")),
      el("td", { text: r.updated_at ? ago(r.updated_at) : "" }), el("td", { text: detailText(r) }),
      el("td", {}, r.kind === "receipt" ? receiptActions(r) : ""));
  });
}

// A stuck receipt has no page of its own: its resolutions (retry, abandon) sit in its row, for a
// token whose roles may resolve on a server that writes (POST /v1/receipts/{id}/resolve).
function receiptActions(r) {
  if (!signedIn || !signedIn.writable || !signedIn.actions.includes("resolve") || !(r.actions || []).length) return "";
  const select = el("select", { className: "receipt-resolution" }, ...r.actions.map((a) => el("option", { value: a, text: words(a) })));
  const evidence = el("input", { className: "receipt-evidence", required: true, size: 24, placeholder: "what you checked" });
  const button = el("button", { className: "receipt-resolve", type: "button", text: "Resolve" });
  button.addEventListener("click", async () => {
    if (lacksEvidence("attention", evidence)) return;
    if (!window.confirm("Resolve as " + words(select.value) + " with this evidence?\n\nreceipt " + r.id)) return;
    try {
      const result = await api("/v1/receipts/" + r.id + "/resolve", { method: "POST",
        body: JSON.stringify({ resolution: select.value, evidence: evidence.value }) });
      await showAttention(); // the queue shows the new state before the note says what changed
      say("attention", "receipt " + r.id + ": recorded " + result.recorded.map((e) => e.event).join(", ") + "; " + words(result.status), false);
    } catch (error) {
      say("attention", error.message, true);
    }
  });
  return el("span", { className: "receipt-actions" }, select, " ", evidence, " ", button);
}

function operationRow(tr, r) {
  tr.append(idCell(r.operation_id), el("td", { text: r.integration }), el("td", {}, badge(r.status)),
    el("td", { text: r.attempts + " of " + r.max_attempts }),
    el("td", {}, r.attention ? badge(r.attention, "warn") : ""), el("td", { text: when(r.created_at) }));
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
    for (const item of page.items) { const tr = el("tr", { "data-id": item.operation_id }); operationRow(tr, item); body.appendChild(tr); }
  } else {
    fill("operations", "#operations-table", page.items, operationRow);
  }
}

async function showApprovals() {
  const page = await api("/v1/approvals?limit=500");
  fill("approvals", "#approvals-table", page.items, (tr, r) => {
    tr.append(idCell(r.operation_id), el("td", { text: r.integration }), el("td", { text: r.tenant }),
      el("td", { text: when(r.created_at) }));
  });
}

// ------------------------------------------------------------------------ routing

let routes = 0; // a later navigation supersedes one still loading: only the latest reports

async function route() {
  const run = ++routes;
  delete document.body.dataset.loaded; // "loaded" speaks for the latest navigation only
  const hash = location.hash.slice(1) || "attention";
  let [name, id] = hash.split("/");
  // An unknown address (a mistyped or stale link) shows the queue and says so, rather than
  // leaving the previous page on screen as if it were the one asked for.
  const unknown = $("#page-" + (name === "op" ? "operation" : name)) ? null : name;
  if (unknown !== null) name = "attention";
  const page = name === "op" ? "operation" : name;
  const section = $("#page-" + page);
  for (const other of document.querySelectorAll(".page")) other.classList.remove("shown");
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("current", link.dataset.page === name);
  section.classList.add("shown");
  say(page, "", false); // a banner belongs to one visit of one page
  if (page !== "metrics") stopSampling();
  try {
    await checkSession();
    showGlance(await fetchMetrics());
    if (page !== "metrics" && !signedIn) {
      forget();
      throw new Error(document.body.dataset.signedIn === "refused"
        ? "The token was refused: sign in with a configured token." : "Sign in with a bearer token to see this page.");
    }
    if (page === "metrics") await showMetrics();
    else if (page === "attention") await showAttention();
    else if (page === "operations") await showOperations(false);
    else if (page === "approvals") await showApprovals();
    else if (page === "operation") await showOperation(id);
    if (run !== routes) return;
    if (unknown !== null) {
      say(page, `There is no page "${unknown}": this is the attention queue.`, true);
      document.body.dataset.loaded = "unknown";
    } else document.body.dataset.loaded = hash;
  } catch (error) {
    if (run !== routes) return;
    say(page, error.message, true);
    document.body.dataset.loaded = "error";
  }
}

function currentPage() {
  const name = (location.hash.slice(1) || "attention").split("/")[0];
  return name === "op" ? "operation" : name;
}

function setUp() {
  for (const name of ["status", "outcome"]) {
    const select = $("#filters select[name=" + name + "]");
    for (const value of name === "status" ? STATUSES : OUTCOMES) select.appendChild(el("option", { text: value }));
  }
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value);
    $("#token").value = "";
    showSession("no");
    route();
  });
  $("#sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    signedIn = null;
    forget();
    showSession("no");
    route();
  });
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    showOperations(false).catch((e) => say("operations", e.message, true));
  });
  $("#more").addEventListener("click", () => showOperations(true).catch((e) => say("operations", e.message, true)));
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", setUp);
