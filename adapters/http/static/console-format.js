// opledger console: building elements and formatting values (docs/adr/0003-operator-console.md).
// Every value from the server is set with textContent or an attribute, never parsed as HTML.
"use strict";

const $ = (selector, root) => (root || document).querySelector(selector);

// An element with attributes (className, dataset entries as data-*) and children (text or nodes).
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

// Words for a machine name: "settlement_blocked" -> "settlement blocked".
const words = (name) => String(name).replaceAll("_", " ");

// Which colour a status, outcome, approval or reason is shown in.
const TONES = {
  succeeded: "ok", settled: "ok", granted: "ok", not_required: "muted", none: "muted",
  failed: "bad", settlement_blocked: "bad", denied: "bad", blocked: "bad",
  ambiguous: "warn", required: "warn", cancelled: "muted", abandoned: "muted", not_applied: "muted",
  pending: "active", claimed: "active", dispatching: "active", accepted: "active",
};

function badge(text, tone) {
  return el("span", { className: "badge " + (tone || TONES[text] || "info"), "data-badge": text }, words(text));
}

function seconds(total) {
  if (total === null || total === undefined || Number.isNaN(total)) return "";
  const s = Math.abs(total);
  if (s === 0) return "0 s";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return (s < 10 ? s.toFixed(1).replace(/\.0$/, "") : s.toFixed(0)) + " s";
  if (s < 7200) return (s / 60).toFixed(0) + " min";
  if (s < 172800) return (s / 3600).toFixed(1).replace(/\.0$/, "") + " h";
  return (s / 86400).toFixed(1).replace(/\.0$/, "") + " d";
}

function ago(iso) {
  return seconds(Math.max(0, (Date.now() - Date.parse(iso)) / 1000));
}

// "2026-01-01 00:00:06 UTC"
function when(iso) {
  if (!iso) return "";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  return at.toISOString().replace("T", " ").replace(/\.\d+Z$/, "").replace(/Z$/, "") + " UTC";
}

// A long digest or id shortened for reading; the whole value stays in the title.
function short(text, keep) {
  const value = String(text);
  const n = keep || 12;
  return value.length > 2 * n + 1 ? value.slice(0, n) + "…" + value.slice(-6) : value;
}

// Any JSON value as readable text: no nulls, no braces.
function plain(value) {
  if (value === null || value === undefined || value === "") return "—";
  if (Array.isArray(value)) return value.length ? value.map(plain).join(", ") : "—";
  if (typeof value === "object") {
    return Object.entries(value).filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => words(k) + ": " + plain(v)).join("; ") || "—";
  }
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "string" && /^\d{4}-\d\d-\d\d[T ]\d\d:\d\d/.test(value)) return when(value.replace(" ", "T"));
  return String(value);
}

// The banner of one page: an error raised on a page stays on that page only.
// The API refuses an action without evidence (422); the console says so before asking to confirm.
function lacksEvidence(page, input) {
  if (input.value.trim()) return false;
  say(page, "Evidence is required: say what you checked before you resolve.", true);
  input.focus();
  return true;
}

function say(page, text, isError) {
  const banner = $("#page-" + page + " .banner");
  if (!banner) return;
  banner.textContent = text || "";
  banner.className = "banner" + (isError ? " error" : " note");
  banner.hidden = !text;
}
