// opledger console: one operation at a glance (badges, its lifecycle as phases with durations,
// its fields in plain words) and the actions the API offers this token for it (issue 31 item 5).
"use strict";

// Which phase of the lifecycle each event starts; consecutive events of one phase merge.
const PHASE_OF = {
  Intended: "intent", ApprovalGranted: "approval", ApprovalDenied: "approval", ApprovalVoided: "approval",
  BudgetWaited: "budget wait", Claimed: "claim", LeaseRenewed: "claim", DeclarationMismatched: "claim",
  AttemptStarted: "attempt", RetryScheduled: "retry wait", Accepted: "accepted", RemoteStatusObserved: "polls",
  RemoteOverdue: "overdue", CallbackReceived: "callback", Succeeded: "outcome", Failed: "outcome",
  Ambiguous: "outcome", Cancelled: "outcome", DeadlineExceeded: "outcome", BudgetExhausted: "outcome",
  CancelRequested: "cancel", CancelFailed: "cancel", LateObservationRecorded: "late observation",
  SettlementFailed: "settlement", SettlementBlocked: "blocked", Settled: "settled", Resolved: "resolved",
  WriteRefused: "write refused",
};
const OUTCOME_WORDS = { Succeeded: "succeeded", Failed: "failed", Ambiguous: "ambiguous", Cancelled: "cancelled",
  DeadlineExceeded: "deadline exceeded", BudgetExhausted: "budget exhausted" };
const MERGED = new Set(["claim", "polls", "callback", "settlement", "approval", "cancel"]);

// The timeline's events grouped into phases: [{kind, label, start, end, events}], oldest first.
function phasesOf(timeline) {
  const phases = [];
  let attempts = 0;
  for (const entry of timeline) {
    if (!entry.at) continue; // a record that does not decode ends the timeline
    // A claim that takes over an expired lease is a phase of its own: the worker before it stopped.
    const kind = entry.event === "Claimed" && entry.details.takeover ? "takeover" : PHASE_OF[entry.event] || "other";
    // A callback that reports the result is the outcome itself (no separate outcome event).
    const outcome = entry.event === "CallbackReceived" && ["succeeded", "failed"].includes(entry.details.outcome)
      ? entry.details.outcome : null;
    const last = phases[phases.length - 1];
    if (last && last.kind === kind && MERGED.has(kind) && !last.outcome && !outcome) {
      last.events.push(entry);
      continue;
    }
    let label = kind;
    if (kind === "attempt") label = "attempt " + (++attempts);
    else if (kind === "outcome") label = OUTCOME_WORDS[entry.event];
    else if (outcome) label = outcome + " by callback";
    else if (kind === "takeover") label = "takeover (lease expired)";
    else if (kind === "other") label = entry.event;
    phases.push({ kind, label, outcome, event: entry.event, start: Date.parse(entry.at), events: [entry] });
  }
  for (let i = 0; i < phases.length; i++) phases[i].end = i + 1 < phases.length ? phases[i + 1].start : null;
  return phases;
}

function showPhases(op, timeline) {
  const phases = phasesOf(timeline);
  const list = $("#phases");
  list.replaceChildren();
  // The last phase of an operation still under way lasts until now (the browser's clock is not
  // the ledger's, so no duration is guessed for it).
  const finished = Boolean(op.disposition) || op.settlement === "settled" ||
    (op.settlement === "not_required" && Boolean(op.outcome));
  for (const phase of phases) {
    const lasted = phase.end === null ? null : (phase.end - phase.start) / 1000;
    const count = phase.events.length > 1 ? " ×" + phase.events.length : "";
    const tone = phase.outcome ? TONES[phase.outcome]
      : phase.kind === "outcome" ? (TONES[OUTCOME_WORDS[phase.event]] || "bad") : "";
    const item = el("li", { className: "phase " + phase.kind.replaceAll(" ", "-") + (tone ? " " + tone : ""),
      "data-phase": phase.kind, "data-seconds": lasted === null ? "" : lasted,
      title: phase.events.map((e) => e.event + " at " + when(e.at)).join("\n") },
    el("span", { className: "label", text: phase.label + count }),
    el("span", { className: "duration", text: lasted === null ? (finished ? "" : "until now") : seconds(lasted) }));
    // Long phases take more room, on a log scale so a short one stays readable.
    item.style.flexGrow = String(1 + Math.log10(1 + (lasted || 0)));
    list.appendChild(item);
  }
  if (phases.length > 1) {
    const total = ((phases[phases.length - 1].start) - phases[0].start) / 1000;
    list.appendChild(el("li", { className: "total", text: "intent to last event " + seconds(total) }));
  }
}

function card(title, rows) {
  const shown = rows.filter(([, value]) => value !== null && value !== undefined && value !== "" &&
    !(Array.isArray(value) && value.length === 0));
  if (!shown.length) return null;
  const list = el("dl");
  for (const [name, value] of shown) {
    list.append(el("dt", { text: name }), el("dd", {}, value instanceof Node ? value : plain(value)));
  }
  return el("section", { className: "card", "data-card": title }, el("h4", { text: title }), list);
}

function digest(value) {
  return value ? el("code", { title: value, text: short(value, 14) }) : null;
}

function traceLink(op) {
  if (!op.trace_id) return null;
  if (!op.trace_url) return el("code", { title: "set OPLEDGER_TRACE_URL_TEMPLATE to link it", text: op.trace_id });
  return el("a", { href: op.trace_url, target: "_blank", rel: "noopener noreferrer", className: "trace",
    text: op.trace_id });
}

function failureText(failure) {
  if (!failure) return null;
  const parts = [failure.category && words(failure.category), failure.status_code && "HTTP " + failure.status_code,
    failure.detail, failure.retryable === false ? "not retryable" : null];
  return parts.filter(Boolean).join(", ") || plain(failure);
}

function showCards(op) {
  const source = op.source || {};
  const authority = op.authority || {};
  const payload = op.payload ? el("table", { className: "payload" },
    ...Object.entries(op.payload).map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: plain(v) })))) : null;
  const approval = op.approval_detail;
  const cards = [
    card("Outcome", [["execution", op.execution], ["settlement", words(op.settlement)], ["outcome", op.outcome],
      ["failure", failureText(op.failure)], ["ambiguous because", op.ambiguity_reason && words(op.ambiguity_reason)],
      ["last retry", op.last_retry_reason], ["attention", op.attention && words(op.attention)],
      ["disposition", op.disposition], ["cancellation", op.cancel], ["error", op.error]]),
    card("Integration", [["name", op.integration + (op.integration_version ? " v" + op.integration_version : "")],
      ["tenant", op.tenant], ["delivery mode", op.delivery_mode && words(op.delivery_mode)], ["target", op.target],
      ["attempts", op.attempts + " of " + op.max_attempts], ["fencing epoch", op.epoch],
      ["remote id", op.remote_id], ["remote status", op.remote_status], ["follows by", op.follow],
      ["followed until", op.follow_until], ["budget wait", op.budget_wait]]),
    card("Source", [["entity", source.entity_type], ["entity id", source.entity_id && el("code", { text: source.entity_id })],
      ["entity version", source.entity_version], ["effect", source.effect_index], ["settles through", source.action],
      ["created", op.created_at], ["updated", op.updated_at]]),
    card("Authority and trace", [["source action", authority.source_action],
      ["principal", (authority.principal_chain || [op.principal]).filter(Boolean).join(" for ")],
      ["trace", traceLink(op)], ["declaration", digest(authority.integration_digest || op.integration_digest)],
      ["host code", digest(authority.code_digest || op.code_digest)]]),
    approval ? card("Approval", [["state", approval.state], ["purpose", approval.purpose],
      ["approved by", approval.approved_by], ["expires", approval.expires_at], ["voided", approval.voided]]) : null,
    op.budgets && op.budgets.length ? card("Call budgets", op.budgets.map((b) => [b.level + " " + b.scope,
      b.calls_used + " of " + b.calls_per_window + " calls per " + seconds(b.window_seconds) +
      (b.waiting_until ? ", waiting until " + when(b.waiting_until) : "")])) : null,
    payload ? card("Payload (redacted by classification)", [["fields", payload]]) : null,
  ];
  $("#op-cards").replaceChildren(...cards.filter(Boolean));
}

function showBadges(op) {
  const badges = [badge(op.status)];
  if (op.outcome && op.outcome !== op.status) badges.push(badge(op.outcome));
  if (op.attention && op.attention !== op.status) badges.push(badge(op.attention, "warn"));
  if (op.approval && op.approval !== "not_required") badges.push(badge("approval " + op.approval,
    TONES[op.approval]));
  if (op.disposition && op.disposition !== op.status) badges.push(badge(op.disposition, "muted"));
  $("#op-badges").replaceChildren(...badges);
}

function field(label, input) {
  return el("label", {}, label + " ", input);
}

// One fieldset per action the API offers this token now; what it withholds, said why.
function showActions(op) {
  const box = $("#actions");
  box.replaceChildren();
  const offers = Object.fromEntries((op.actions || []).map((a) => [a.action, a]));
  const resolutions = offers.resolve ? offers.resolve.resolutions : [];
  const decide = resolutions.filter((r) => r !== "acknowledge");
  if (decide.length) {
    const select = el("select", { id: "resolution" }, ...decide.map((r) => el("option", { value: r, text: words(r) })));
    const evidence = el("input", { id: "evidence", required: true, size: 50, placeholder: "what you checked" });
    const button = el("button", { id: "resolve", type: "button", text: "Resolve" });
    button.addEventListener("click", () => act("resolve", { resolution: select.value, evidence: evidence.value },
      "Resolve as " + words(select.value) + " with this evidence?", evidence));
    box.append(el("fieldset", { "data-action": "resolve" }, el("legend", { text: "Resolve" }),
      field("resolution", select), field("evidence", evidence), button));
  }
  if (resolutions.includes("acknowledge")) {
    const evidence = el("input", { id: "ack-evidence", required: true, size: 50, placeholder: "what you checked with the provider" });
    const button = el("button", { id: "acknowledge", type: "button", text: "Acknowledge" });
    button.addEventListener("click", () => act("resolve", { resolution: "acknowledge", evidence: evidence.value },
      "Acknowledge the late observation and keep the recorded outcome?", evidence));
    box.append(el("fieldset", { "data-action": "acknowledge" }, el("legend", { text: "Late observation" }),
      el("p", { className: "hint", text: "The provider reported something after the outcome was recorded; the outcome stays." }),
      field("evidence", evidence), button));
  }
  if (offers.retry_settlement) {
    const evidence = el("input", { id: "settle-evidence", required: true, size: 50, placeholder: "what you fixed" });
    const button = el("button", { id: "retry-settlement", type: "button", text: "Retry settlement" });
    button.addEventListener("click", () => act("retry-settlement", { evidence: evidence.value },
      "Retry the blocked settlement?", evidence));
    box.append(el("fieldset", { "data-action": "retry_settlement" }, el("legend", { text: "Blocked settlement" }),
      field("evidence", evidence), button));
  }
  if (offers.cancel) {
    const reason = el("input", { id: "cancel-reason" });
    const button = el("button", { id: "cancel", type: "button", text: "Cancel" });
    button.addEventListener("click", () => act("cancel", { reason: reason.value }, "Request cancellation?"));
    box.append(el("fieldset", { "data-action": "cancel" }, el("legend", { text: "Cancel" }), field("reason", reason), button));
  }
  if (offers.approve || offers.deny) {
    const set = el("fieldset", { "data-action": "approval" }, el("legend", { text: "Approval" }));
    if (offers.approve) {
      const button = el("button", { id: "approve", type: "button", text: "Approve" });
      button.addEventListener("click", () => act("approve", {}, "Approve this operation?"));
      set.append(button);
    }
    if (offers.deny) {
      const reason = el("input", { id: "deny-reason" });
      const button = el("button", { id: "deny", type: "button", text: "Deny" });
      button.addEventListener("click", () => act("deny", { reason: reason.value }, "Deny this operation?"));
      set.append(" ", field("reason", reason), button);
    }
    box.append(set);
  }
  if (!box.children.length) box.append(el("p", { className: "hint", id: "no-actions", text: "Nothing here for you to do now." }));
  if (op.withheld && op.withheld.length) {
    box.append(el("ul", { className: "withheld" }, ...op.withheld.map((w) =>
      el("li", { "data-action": w.action }, el("b", { text: words(w.action) }), ": " + w.reason))));
  }
}

function detailsText(details) {
  return Object.entries(details).filter(([, v]) => v !== null && v !== "" && !(Array.isArray(v) && !v.length))
    .map(([k, v]) => words(k) + ": " + plain(v)).join("; ");
}

async function showOperation(id) {
  const [op, timeline] = await Promise.all([api("/v1/operations/" + id), api("/v1/operations/" + id + "/timeline")]);
  $("#op-id").textContent = op.operation_id;
  showBadges(op);
  showPhases(op, timeline);
  showCards(op);
  showActions(op);
  const body = $("#timeline-table tbody");
  body.replaceChildren(...timeline.map((e) => el("tr", {}, el("td", { text: e.version }), el("td", { className: "at", text: when(e.at) }),
    el("td", { text: e.event }), el("td", { text: detailsText(e.details) }))));
}

async function act(path, body, question, evidence) {
  const id = $("#op-id").textContent;
  if (evidence && lacksEvidence("operation", evidence)) return;
  if (!window.confirm(question + "\n\noperation " + id)) return;
  try {
    const result = await api("/v1/operations/" + id + "/" + path, { method: "POST", body: JSON.stringify(body) });
    const events = result.recorded.map((e) => e.event).join(", ") || "nothing new";
    await showOperation(id); // the page shows the new state before the note says what changed
    say("operation", "recorded " + events + "; status " + words(result.status), false);
  } catch (error) {
    say("operation", error.message, true);
  }
}
