"""Generate the protocol model's rules (``docs/model/rules.pml``) from the Python table and
decisions, so the model cannot drift from the code.

What comes from where:

- the states (``ledger.status``) and the delivery modes' rules (``ledger.modes.RULES``);
- every command the model runs, one Promela guard macro ``can_<command>`` and one effect
  ``do_<command>`` per command, built row by row from ``ledger.transitions.TRANSITIONS``: the
  row's source state and its guards (mapped to the model's variables by :data:`GUARD_PML`) and
  its target state;
- the decisions, by *evaluating the real functions* over every abstract state the model has and
  writing their answers as truth tables: ``due_work`` (what a worker may take), ``claim_plan``
  (what a claim does next), ``cancels_unsent``, ``attempts_left``, ``deadline_ends_ambiguous``,
  ``needs_follower``, ``late_callback_contradicts``, ``settlement_try_left``, and the mode's
  rule after a lost response.

A *planted bug* (``--plant NAME``, :data:`PLANTED`) removes one rule: its guard is left out of
every generated guard, and the decisions are evaluated with the same rule patched out of the
Python code (:func:`planted`), which is also how the replay test applies it to the real
aggregate (tests/unit/test_protocol_model.py).

Run: ``python docs/model/generate.py`` rewrites ``docs/model/rules.pml``; ``--plant NAME --out
PATH`` writes a variant; ``--check`` fails when the committed file is stale.

Source: issue 33 items 2-4; docs/model.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run from anywhere: the repository's ledger/

from ledger import decisions, lifecycle, modes, transitions  # noqa: E402
from ledger.commands import base as command_base  # noqa: E402
from ledger.declarations import DeliveryMode, RetryPolicy  # noqa: E402
from ledger.outcomes import Ambiguous, Failed, FailureCategory  # noqa: E402
from ledger.status import ACTIVE_STATES as _ACTIVE  # noqa: E402
from ledger.status import TERMINAL_EXECUTION_STATES as _TERMINAL  # noqa: E402
from ledger.status import ExecutionState as E  # noqa: E402
from ledger.status import SettlementState as S  # noqa: E402

RULES_FILE = HERE / "rules.pml"
ACTIVE_STATES = sorted(_ACTIVE, key=list(E).index)  # sets: ordered, so the output is stable
TERMINAL_EXECUTION_STATES = sorted(_TERMINAL, key=list(E).index)
MAX_ATTEMPTS = 2
"""The model's attempt budget (``Intended.max_attempts``)."""
STL_MAX = 2
"""The model's settlement tries (``settlement.max_attempts``)."""

MODES = list(DeliveryMode)
MODELLED = ("claim", "start_attempt", "accept", "succeed", "fail", "mark_ambiguous", "schedule_retry",
            "exhaust_budget", "receive_callback", "request_cancel", "cancel", "cancel_failed", "exceed_deadline",
            "settle", "fail_settlement", "block_settlement", "resolve")
"""The commands the model runs. Left out (abstracted; docs/model.md): approvals, budget waits,
declaration mismatches, lease renewals (a renewal is a lease that did not expire), polled status
words, the overdue mark of accepted work, refused writes."""

GUARD_PML: dict[str, str] = {
    "epoch": "e == epoch",
    "lease_live": "lease_live",
    "lease_free": "!lease_live",
    "lease_free_or_epoch": "(!lease_live || e == epoch)",
    "not_cancelled": "!CANCELS_UNSENT",
    "attempt_left": "ATTEMPT_LEFT",
    "budget_used": "!ATTEMPT_LEFT",
    "latest_attempt": "a == attempts",
    "ambiguity": "(!pa_arg || RETRIES_PA)",
    "cancel_requested": "cancel_req",
    "authenticated": "auth",
    "callback_new": "!cb_seen[cb]",
    "contradicts": "CONTRADICTS(outc)",
    "fence": "sref == outcome_ref",
    "settlement_tries": "SETTLEMENT_TRY_LEFT",
    "not_abandoned": "!abandoned",
    # Abstracted: time is not modelled (a deadline may pass at any moment; every claim is due),
    # approvals and call budgets are out of the model, and accepted work is never marked overdue.
    "due": "true", "budget_wait_over": "true", "wait_later": "true", "approved": "true", "approval_valid": "true",
    "approval_undecided": "true", "approval_void": "true", "digest_differs": "true", "hard_limit": "true",
    "deadline_passed": "true", "resolution_fits": "true", "remote_overdue": "false", "epoch_if_given": "true",
}
"""Each table guard as a Promela expression over the model's variables (see protocol.pml)."""

PARAMS: dict[str, str] = {
    "claim": "w", "start_attempt": "e", "accept": "e, a", "succeed": "e, a", "fail": "e, a",
    "mark_ambiguous": "e, a", "schedule_retry": "e, a, pa_arg", "exhaust_budget": "e, when",
    "receive_callback": "cb, outc, auth, a", "request_cancel": "", "cancel": "e", "cancel_failed": "e, a",
    "exceed_deadline": "when", "settle": "sref", "fail_settlement": "sref", "block_settlement": "sref",
    "resolve": "res",
}
"""The parameters of each command's macro and inline (``e``: the caller's epoch; ``a``: the
attempt it answers; ``when``: the branch)."""

EFFECTS: dict[str, str] = {
    "Claimed": "epoch++; lease_live = true; w_lease[w] = true;",
    "AttemptStarted": "attempts++;",
    "Accepted": "RELEASE(); pa = true; follow_poll = (mode != M_CALLBACK);",
    "Ambiguous": "pa = true;",
    "RetryScheduled": "RELEASE(); pa = pa || pa_arg;",
    "CancelRequested": "cancel_req = true;",
    "CancelFailed": "cancel_refused = true;",
    "CallbackReceived": "cb_seen[cb] = true; cb_facts[cb]++;",
    "LateObservationRecorded": "cb_seen[cb] = true; cb_facts[cb]++; late = true;",
    "SettlementFailed": "TRY_USED();",
    "SettlementBlocked": "TRY_USED();",
    "Settled": "entity_changes++;",
}
"""What each event does to the model's variables besides moving the state."""

WHEN: dict[str, str] = {
    "succeeded": "W_SUCCEEDED", "failed": "W_FAILED", "progress": "W_PROGRESS", "late": "W_LATE",
    "none_applied": "W_NONE_APPLIED", "possibly_applied": "W_POSSIBLY_APPLIED", "retry": "W_RETRY",
    "abandon": "W_ABANDON", "retry_settlement": "W_RETRY_SETTLEMENT",
}
BRANCH_PARAM = {"receive_callback": "outc", "exhaust_budget": "when", "resolve": "res", "exceed_deadline": "when"}


@dataclass(frozen=True)
class Plant:
    """A planted bug: the rule it removes and the property SPIN must then find broken.

    Attributes:
        guards: table guards left out of every generated guard.
        prop: the property (``violated_<prop>``) or ``progress`` for the LTL formula.
        patch: removes the same rule from the Python code while active (a context manager).
        note: what the bug is, in words.
    """

    guards: tuple[str, ...]
    prop: str
    patch: Callable[[], contextlib.AbstractContextManager[None]]
    note: str
    defines: tuple[str, ...] = ()


@contextlib.contextmanager
def _setattr(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    old = [(obj, name, getattr(obj, name)) for obj, name, _ in changes]
    try:
        for obj, name, value in changes:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in old:
            setattr(obj, name, value)


def _no_patch() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _unfenced() -> contextlib.AbstractContextManager[None]:
    return _setattr((command_base.CommandBase, "_fence", lambda self, epoch: None))


def _budget_never_used() -> contextlib.AbstractContextManager[None]:
    return _setattr((decisions, "attempts_left", lambda op: 1))


def _every_mode_retries() -> contextlib.AbstractContextManager[None]:
    rules = {mode: modes.ModeRules(**{**{f: getattr(r, f) for f in r.__slots__},  # type: ignore[attr-defined]
                                      "after_lost_response": modes.AfterLostResponse.RETRY,
                                      "retries_possibly_applied": True})
             for mode, r in modes.RULES.items()}
    return _setattr((modes, "RULES", rules))


def _outcomes_resolvable() -> contextlib.AbstractContextManager[None]:
    return _setattr((lifecycle, "RESOLVABLE_EXECUTION", frozenset({E.AMBIGUOUS, *_TERMINAL})))


def _settle_twice() -> contextlib.AbstractContextManager[None]:
    wider = {**lifecycle.BY_SETTLEMENT, "settle": frozenset({S.PENDING, S.SETTLED})}
    return _setattr((lifecycle, "BY_SETTLEMENT", wider))


def _lease_ignored() -> contextlib.AbstractContextManager[None]:
    original = decisions.claimable_at

    def claimable_at(op: Any) -> Any:
        return original(op) if op.execution is E.PENDING else None

    return _setattr((decisions, "claimable_at", claimable_at))


def _tries_never_used() -> contextlib.AbstractContextManager[None]:
    return _setattr((decisions, "settlement_try_left", lambda used, most: True))


PLANTED: dict[str, Plant] = {
    "epoch": Plant(("epoch",), "stale_epoch", _unfenced,
                   "the fencing epoch is not checked: a zombie worker's write lands after a takeover"),
    "attempt_left": Plant(("attempt_left", "budget_used"), "budget", _budget_never_used,
                          "the attempt budget is not checked (aggregate and decisions)"),
    "ambiguity": Plant(("ambiguity",), "ambiguous_retry", _every_mode_retries,
                       "every mode retries a possibly applied attempt (the ambiguity rule removed)"),
    "resolvable": Plant((), "terminal", _outcomes_resolvable,
                        "an operator may retry a terminal outcome: it goes back to pending, then dispatching"),
    "settle_state": Plant((), "settle_once", _settle_twice,
                          "settle is allowed from settled: a second settler changes the entity again"),
    "callback_new": Plant(("callback_new",), "duplicate", _no_patch,
                          "a duplicate callback id is not recognised: a redelivery records a second fact"),
    "authenticated": Plant(("authenticated",), "forged", _no_patch,
                           "callbacks are not authenticated: a forged one changes the operation"),
    "deadline": Plant((), "timeout", _no_patch,
                      "accepted work has no deadline row: it may wait forever"),
    "lease_free": Plant(("lease_free",), "one_lease", _lease_ignored,
                        "a live lease does not stop a claim: two workers hold the operation"),
    "record_before_send": Plant((), "record_before_send", _no_patch,
                                "a worker sends although its AttemptStarted was refused",
                                defines=("#define SEND_WITHOUT_RECORD 1",)),
    "settlement_tries": Plant(("settlement_tries",), "progress", _tries_never_used,
                              "settlement tries are never used up: a failing settlement retries forever"),
}
"""Every planted bug: one per property (issue 33 item 4)."""


@contextlib.contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Apply the Python side of planted bug ``name`` (None: none) while the block runs."""
    if name is None:
        yield
        return
    with PLANTED[name].patch():
        yield


# ------------------------------------------------------------------------------ rendering

def _state(value: Any) -> str:
    return ("X_" if isinstance(value, E) else "S_") + value.name


def _truth(cases: list[tuple[str, bool]]) -> str:
    """A disjunction of the cases that are true ("false" when none)."""
    true = [f"({c})" for c, ok in cases if ok]
    return " || ".join(true) if true else "false"


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _abstract_op(execution: E, *, cancel_req: bool = False, pa: bool = False, attempts: int = 0,
                 lease_live: bool = False, follow_poll: bool = True, cancel_refused: bool = False,
                 mode: DeliveryMode = DeliveryMode.IDEMPOTENT) -> SimpleNamespace:
    # One abstract state of the model as the fields the decisions read; time: every deadline
    # far ahead, every due time passed, a live lease ahead and an expired one behind.
    held = execution in (E.CLAIMED, E.DISPATCHING, E.ACCEPTED)
    return SimpleNamespace(
        execution=execution, settlement=S.NONE, approval="not_required", cancel_requested=cancel_req,
        possibly_applied=pa, state_entered_at=T0, deadlines={s.value: 86_400.0 for s in ACTIVE_STATES}, due_at=T0,
        lease_expires_at=(T0 + timedelta(hours=1) if lease_live else T0) if held else None,
        budget_wait_until=None, settlement_due_at=None, follow="poll" if follow_poll else "callback",
        follow_until=None, remote_overdue=False, cancel_refused=cancel_refused, write_refused=None,
        attempts=attempts, max_attempts=MAX_ATTEMPTS, delivery_mode=mode)


NOW = T0 + timedelta(seconds=1)
BOOLS = (False, True)


def _decision_macros() -> list[str]:
    out = []
    out.append("/* decisions.cancels_unsent */")
    out.append("#define CANCELS_UNSENT (" + _truth([
        (f"cancel_req == {int(c)} && pa == {int(p)}", decisions.cancels_unsent(_abstract_op(E.PENDING, cancel_req=c,
                                                                                             pa=p)))
        for c, p in itertools.product(BOOLS, BOOLS)]) + ")")
    out.append("/* decisions.attempts_left > 0 */")
    out.append("#define ATTEMPT_LEFT (" + _truth([
        (f"attempts == {n}", decisions.attempts_left(_abstract_op(E.PENDING, attempts=n)) > 0)
        for n in range(MAX_ATTEMPTS + 2)]) + ")")
    out.append("/* decisions.deadline_ends_ambiguous */")
    out.append("#define DEADLINE_AMBIGUOUS (" + _truth([
        (f"exec == {_state(s)} && pa == {int(p)}", decisions.deadline_ends_ambiguous(_abstract_op(s, pa=p)))
        for s in ACTIVE_STATES for p in BOOLS]) + ")")
    out.append("/* decisions.settlement_try_left(stl_tries, STL_MAX) */")
    out.append("#define SETTLEMENT_TRY_LEFT (" + _truth([
        (f"stl_tries == {n}", decisions.settlement_try_left(n, STL_MAX)) for n in range(STL_MAX + 2)]) + ")")
    out.append("/* decisions.late_callback_contradicts(exec, reported) */")
    out.append("#define CONTRADICTS(outc) (" + _truth([
        (f"exec == {_state(s)} && outc == {WHEN[r]}", decisions.late_callback_contradicts(s, r))
        for s in (E.SUCCEEDED, E.FAILED, E.CANCELLED, E.AMBIGUOUS) for r in ("succeeded", "failed", "progress")])
        + ")")
    # due_work: what a worker without a lease may take (Claim, Reclaim, Poll), what anyone
    # records (Cancel); deadlines and settlement are the timer's and the settlers' (protocol.pml).
    take, cancel = [], []
    for s in ACTIVE_STATES:
        for c, p, live, poll, refused in itertools.product(BOOLS, BOOLS, BOOLS, BOOLS, BOOLS):
            if s is E.PENDING and live:
                continue
            work = decisions.due_work(_abstract_op(s, cancel_req=c, pa=p, lease_live=live, follow_poll=poll,
                                                   cancel_refused=refused), NOW)
            cond = (f"exec == {_state(s)} && cancel_req == {int(c)} && pa == {int(p)} && lease_live == {int(live)}"
                    f" && follow_poll == {int(poll)} && cancel_refused == {int(refused)}")
            take.append((cond, isinstance(work, (decisions.Claim, decisions.Reclaim, decisions.Poll))))
            cancel.append((cond, isinstance(work, decisions.Cancel)))
    out.append("/* decisions.due_work is Claim, Reclaim or Poll */")
    out.append("#define DUE_TAKE (" + _truth(take) + ")")
    out.append("/* decisions.due_work is Cancel */")
    out.append("#define DUE_CANCEL (" + _truth(cancel) + ")")
    # claim_plan, on the state the claim sees
    out.append("/* decisions.claim_plan */")
    out.append("inline claim_plan(step) {\n  if")
    for s in ACTIVE_STATES:
        for c, p, n in itertools.product(BOOLS, BOOLS, range(MAX_ATTEMPTS + 1)):
            step = decisions.claim_plan(_abstract_op(s, cancel_req=c, pa=p, attempts=n))
            out.append(f"  :: exec == {_state(s)} && cancel_req == {int(c)} && pa == {int(p)} && attempts == {n}"
                       f" -> step = STEP_{step.name}")
    out.append("  :: else -> step = STEP_NOTHING\n  fi\n}")
    # decide / after_lookup: what a worker records after a response (the real functions, with
    # a retry policy of the model's budget and no jitter)
    policy = RetryPolicy(max_attempts=MAX_ATTEMPTS, base_backoff_seconds=1.0, max_backoff_seconds=1.0, jitter=0.0)
    rng = random.Random(0)

    def kind(decision: Any) -> str:
        if isinstance(decision, decisions.Record):
            return "D_RECORD"
        return "D_" + {"Retry": "RETRY", "GiveUp": "GIVE_UP", "Lookup": "LOOKUP",
                       "AwaitCallback": "AWAIT"}[type(decision).__name__]

    failed = Failed(FailureCategory.SERVER_ERROR, retryable=True, detail="")
    lost = Ambiguous(reason="timeout")
    out.append("/* decisions.decide: a retryable failure, a lost response; decisions.after_lookup: not received */")
    for name, call in (
            ("decide_failed", lambda m, n: decisions.decide(outcome=failed, mode=m, policy=policy, attempts=n,
                                                             now=NOW, rng=rng)),
            ("decide_lost", lambda m, n: decisions.decide(outcome=lost, mode=m, policy=policy, attempts=n,
                                                           now=NOW, rng=rng)),
            ("decide_not_received", lambda m, n: decisions.after_lookup(found=None, policy=policy, attempts=n,
                                                                         now=NOW, rng=rng))):
        out.append(f"inline {name}(r) {{\n  if")
        for (i, m), n in itertools.product(enumerate(MODES), range(1, MAX_ATTEMPTS + 2)):
            out.append(f"  :: mode == {i} && attempts == {n} -> r = {kind(call(m, n))}")
        out.append("  :: else -> r = D_RECORD\n  fi\n}")
    out.append("#define RETRIES_PA (" + _truth([(f"mode == {i}", modes.rules_for(m).retries_possibly_applied)
                                                 for i, m in enumerate(MODES)]) + ")")
    return out


def _rows(name: str | None) -> list[transitions.Transition]:
    rows = [row for row in transitions.TRANSITIONS if row.command in MODELLED]
    if name == "deadline":
        rows = [r for r in rows if not (r.command == "exceed_deadline" and r.source is E.ACCEPTED)]
    if name == "resolvable":
        rows += [transitions.Transition(s, "resolve", "Resolved", ("not_abandoned",), E.PENDING, when="retry")
                 for s in (E.SUCCEEDED, E.FAILED, E.CANCELLED)]
    if name == "settle_state":
        rows += [transitions.Transition(S.SETTLED, "settle", "Settled", (), None)]
    return rows


def _guard(row: transitions.Transition, dropped: tuple[str, ...]) -> str:
    source = "stl" if isinstance(row.source, S) else "exec"
    parts = [f"{source} == {_state(row.source)}"]
    parts += [GUARD_PML[g] for g in row.guards if g not in dropped]
    if row.command in BRANCH_PARAM and row.when != "late":
        parts.append(f"{BRANCH_PARAM[row.command]} == {WHEN[row.when]}")
    return "(" + " && ".join(p for p in parts if p != "true") + ")"


def check(prop: str, cond: str) -> str:
    """A property assertion: ``violated_<prop>`` names the property in SPIN's report and trail."""
    return f"violated_{prop} = !({cond}); assert(!violated_{prop});"


PROPERTIES = ("budget", "ambiguous_retry", "terminal", "settle_once", "duplicate", "forged", "timeout",
              "one_lease", "record_before_send", "stale_epoch")
"""The safety properties (issue 33 item 3); ``progress`` is the LTL formula of protocol.pml."""


def _effect(row: transitions.Transition) -> str:
    steps = [f'printf("CMD {row.command} {row.event} {row.when or "-"} w=%d e=%d a=%d\\n", _pid, {_arg(row, "e")}, '
             f'{_arg(row, "a")});']
    if "epoch" in row.guards:
        steps.append(check("stale_epoch", "e == epoch"))
    if row.event == "Claimed":
        steps.append(check("one_lease", "LIVE_LEASES == 0"))
    steps.append(EFFECTS.get(row.event, ""))
    if row.to is not None and row.to != row.source:
        kind = "stl" if isinstance(row.to, S) else "exec"
        if kind == "exec":  # invariant 1: a terminal outcome is never left (so never re-dispatched)
            steps.append(check("terminal", "!TERMINAL"))
        steps.append(f"{kind} = {_state(row.to)};")
        if isinstance(row.to, E) and row.to in (*TERMINAL_EXECUTION_STATES, E.AMBIGUOUS):
            steps.append("REACH_OUTCOME();")
        if row.to is E.PENDING:
            steps.append("RELEASE();")
    if row.command == "resolve":
        steps.append(RESOLUTION_EFFECTS.get(row.when, ""))
    steps += [check(prop, cond) for prop, cond in AFTER.get(row.event, ())]
    return " ".join(s for s in steps if s)


RESOLUTION_EFFECTS = {"retry": "pa = false;", "abandon": "abandoned = true;", "retry_settlement": "stl_tries = 0;"}
"""What a resolution does besides moving the state (``Resolved.apply``)."""
AFTER: dict[str, tuple[tuple[str, str], ...]] = {
    "AttemptStarted": (("budget", "attempts <= MAX_ATTEMPTS"), ("terminal", "!was_terminal")),
    "Settled": (("settle_once", "entity_changes <= 1"),),
    "CallbackReceived": (("forged", "auth"), ("duplicate", "cb_facts[cb] <= 1")),
    "LateObservationRecorded": (("forged", "auth"), ("duplicate", "cb_facts[cb] <= 1")),
}
"""The properties checked once an event is recorded."""


def _arg(row: transitions.Transition, name: str) -> str:
    return name if name in PARAMS[row.command].split(", ") else "0"


def render(name: str | None = None) -> str:
    """The rules file for planted bug ``name`` (None: the real rules)."""
    dropped = PLANTED[name].guards if name else ()
    with planted(name):
        macros = _decision_macros()
        rows = _rows(name)
    lines = [
        "/* GENERATED by docs/model/generate.py from ledger/transitions.py, ledger/decisions.py and",
        "   ledger/modes.py: do not edit; run `python docs/model/generate.py` (a test checks it is current). */",
        f"/* planted bug: {name}: {PLANTED[name].note} */" if name else "/* no planted bug */",
        *(PLANTED[name].defines if name else ()),
        f"#define MAX_ATTEMPTS {MAX_ATTEMPTS}",
        f"#define STL_MAX {STL_MAX}",
        "mtype = { " + ", ".join(_state(s) for s in E) + " }",
        "mtype = { " + ", ".join(_state(s) for s in S) + " }",
        "mtype = { " + ", ".join(f"STEP_{step.name}" for step in decisions.ClaimStep) + " }",
        "mtype = { D_RECORD, D_RETRY, D_GIVE_UP, D_LOOKUP, D_AWAIT }",
        "mtype = { " + ", ".join(dict.fromkeys(WHEN.values())) + " }",
        *(f"#define M_{m.name} {i}" for i, m in enumerate(MODES)),
        f"#define NMODES {len(MODES)}",
        "#define ACTIVE (" + " || ".join(f"exec == {_state(s)}" for s in ACTIVE_STATES) + ")",
        "#define TERMINAL (" + " || ".join(f"exec == {_state(s)}" for s in TERMINAL_EXECUTION_STATES) + ")",
        "/* ledger.transitions: the active states with a deadline row (invariant 6) */",
        "#define HAS_DEADLINE (" + _truth([(f"exec == {_state(s)}", any(
            r.command == "exceed_deadline" and r.source is s for r in rows)) for s in ACTIVE_STATES]) + ")",
        *macros,
        "/* ledger.transitions: one guard and one effect per command, row by row */",
    ]
    for command in MODELLED:
        mine = [r for r in rows if r.command == command]
        params = PARAMS[command]
        lines.append(f"#define can_{command}({params}) (" + " || ".join(_guard(r, dropped) for r in mine) + ")")
        lines.append(f"inline do_{command}({params}) {{\n  if")
        for r in mine:
            lines.append(f"  :: {_guard(r, dropped)} -> {_effect(r)}")
        lines.append("  fi\n}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the rules file; ``--plant NAME --out PATH`` writes a variant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plant", choices=sorted(PLANTED))
    parser.add_argument("--out", type=Path, default=RULES_FILE)
    parser.add_argument("--check", action="store_true", help="fail when the committed rules file is stale")
    args = parser.parse_args(argv)
    text = render(args.plant)
    if args.check:
        if args.out.read_text() != text:
            print(f"{args.out} is stale: run python docs/model/generate.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
