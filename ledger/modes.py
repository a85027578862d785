"""One frozen rules record per delivery mode (DESIGN §5; STYLE rule 16).

Everything that behaves differently by delivery mode asks :func:`rules_for` instead of comparing
modes itself: the retry decisions (``ledger.decisions``), the aggregate's ambiguity guard
(``Operation.schedule_retry``), outcome recording (a 2xx in ``callback`` mode means accepted),
and the webhook adapter (which redirects it may follow). ``render_table`` renders DESIGN §5's
table from these records; a test keeps ``docs/delivery-modes.md`` equal to it.

Source: DESIGN §5; docs/adr/0002-executor-services.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ledger.declarations import DeliveryMode


class AfterLostResponse(StrEnum):
    """What the ledger does when egress may have happened and no answer says whether it applied."""

    RETRY = "retry"
    """Send again with the same idempotency key (the provider dedupes, or there is no effect)."""
    LOOK_UP = "look_up"
    """Ask the provider whether it received the operation, then decide from its answer."""
    RECORD_AMBIGUOUS = "record_ambiguous"
    """Record ``Ambiguous`` and stop; an operator resolves it (invariant 3)."""
    AWAIT_CALLBACK = "await_callback"
    """Treat the request as accepted and wait for the provider's authenticated callback."""


class Follow(StrEnum):
    """How the result of accepted work will come (recorded on ``Accepted``)."""

    POLL = "poll"
    """The worker polls the provider's remote operation (``ledger.egress.RemoteOperations``)."""
    CALLBACK = "callback"
    """The provider calls us back (``callback`` mode)."""
    WAIT = "wait"
    """Neither: the adapter cannot poll and the mode expects no callback; the operation waits
    for its deadline (then ``remote_unknown``) or an operator."""


def how_to_follow(mode: DeliveryMode, *, adapter_polls: bool) -> Follow:
    """How accepted work of ``mode`` is followed, given whether the adapter can poll.

    Args:
        mode: the delivery mode.
        adapter_polls: the adapter offers ``poll``/``cancel`` (``ledger.egress.RemoteOperations``).

    Returns:
        ``CALLBACK`` where a 2xx only acknowledges receipt (the provider reports by calling us),
        else ``POLL`` when the adapter can, else ``WAIT``.

    Source: DESIGN §5; docs/adr/0004-accepted-work.md.
    """
    if rules_for(mode).success_means_accepted:
        return Follow.CALLBACK
    return Follow.POLL if adapter_polls else Follow.WAIT


@dataclass(frozen=True, slots=True)
class ModeRules:
    """What one delivery mode allows.

    Attributes:
        mode: the delivery mode these rules are for.
        after_lost_response: what to do when the attempt may have applied and the response was
            lost (a 5xx, a read timeout, a reset after sending, a worker lost mid-attempt).
        retries_possibly_applied: whether an attempt that may have applied may be followed by
            another (only where the provider dedupes on the key or there is no effect).
        follows_redirects: whether the adapter may follow a method-preserving redirect (a
            redirect re-sends the request, which is safe only where a repeat is).
        success_means_accepted: a 2xx only acknowledges receipt; the result comes by callback.
        accepted_deadline: what the ``accepted`` deadline bounds in this mode.
        provider: DESIGN §5's column "the provider…", for the rendered table.
        ledger: DESIGN §5's column "after a lost response the ledger…".
    """

    mode: DeliveryMode
    after_lost_response: AfterLostResponse
    retries_possibly_applied: bool
    follows_redirects: bool
    provider: str
    ledger: str
    success_means_accepted: bool = False
    accepted_deadline: str = "the wait for an accepted remote operation's result"


RULES: dict[DeliveryMode, ModeRules] = {
    rules.mode: rules
    for rules in (
        ModeRules(
            DeliveryMode.IDEMPOTENT, AfterLostResponse.RETRY, retries_possibly_applied=True,
            follows_redirects=True,
            provider="dedupes on our idempotency key", ledger="retries with the **same** key"),
        ModeRules(
            DeliveryMode.RECOVERABLE_REMOTE_ID, AfterLostResponse.LOOK_UP, retries_possibly_applied=False,
            follows_redirects=False,
            provider='can be asked "did you receive operation X?"',
            ledger="looks it up before deciding; retries only when the lookup says not received"),
        ModeRules(
            DeliveryMode.NON_IDEMPOTENT, AfterLostResponse.RECORD_AMBIGUOUS, retries_possibly_applied=False,
            follows_redirects=False,
            provider="offers neither", ledger="records `Ambiguous` and stops; an operator resolves it"),
        ModeRules(
            DeliveryMode.CALLBACK, AfterLostResponse.AWAIT_CALLBACK, retries_possibly_applied=False,
            follows_redirects=False, success_means_accepted=True,
            accepted_deadline="the wait for the provider's authenticated callback",
            provider="reports the result by calling us",
            ledger="waits for the authenticated callback until the deadline"),
        ModeRules(
            DeliveryMode.READ_ONLY, AfterLostResponse.RETRY, retries_possibly_applied=True,
            follows_redirects=True,
            provider="has no side effect", ledger="retries freely"),
    )
}
"""The rules of every delivery mode, by mode."""


def rules_for(mode: DeliveryMode) -> ModeRules:
    """Return the rules record of ``mode``.

    Args:
        mode: a delivery mode.

    Returns:
        Its :class:`ModeRules`. Every ``DeliveryMode`` member has one (a test checks).
    """
    return RULES[mode]


def render_table() -> str:
    """Render DESIGN §5's delivery-mode table from :data:`RULES` (Markdown, one row per mode).

    Returns:
        The table text, header included, ending with a newline.
    """
    lines = ["| mode | the provider… | after a lost response the ledger… |", "|---|---|---|"]
    lines += [f"| `{r.mode.value}` | {r.provider} | {r.ledger} |" for r in RULES.values()]
    return "\n".join(lines) + "\n"


def render_rules() -> str:
    """Render every field of :data:`RULES` as a Markdown table (``docs/delivery-modes.md``).

    Returns:
        The table text, header included, ending with a newline.
    """
    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    lines = ["| mode | after a lost response | retries an attempt that may have applied | follows redirects "
             "| a 2xx means | the `accepted` deadline bounds |", "|---|---|---|---|---|---|"]
    lines += [f"| `{r.mode.value}` | `{r.after_lost_response.value}` | {yes(r.retries_possibly_applied)} "
              f"| {yes(r.follows_redirects)} | {'accepted' if r.success_means_accepted else 'succeeded'} "
              f"| {r.accepted_deadline} |" for r in RULES.values()]
    return "\n".join(lines) + "\n"
