"""Outcomes cross the adapter seam as values, not exceptions (STYLE rule 5).

An adapter returns exactly one of :class:`Succeeded`, :class:`Accepted`, :class:`Failed` or
:class:`Ambiguous` for each egress; executors decide what to record from it and the delivery mode
(DESIGN §5). Exceptions from adapters are bugs or broken infrastructure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureCategory(StrEnum):
    """Why an attempt or an operation failed."""

    CONNECT = "connect"
    """Failure before the request was sent (DNS, refused, TLS): no egress happened."""
    THROTTLED = "throttled"
    """429 or 503: the provider did not process the request."""
    REJECTED = "rejected"
    """A 4xx other than 429: the provider refused it; retrying will not help."""
    SERVER_ERROR = "server_error"
    """5xx after sending: the provider may or may not have applied it."""
    TIMEOUT = "timeout"
    """Read timeout or reset after sending."""
    REMOTE_FAILED = "remote_failed"
    """The remote operation reported failure (poll or callback)."""
    INVALID_REQUEST = "invalid_request"
    """The request could not be built (bad target, missing secret); nothing was sent."""
    DEADLINE = "deadline"
    """A deadline passed with no effect possible."""
    APPROVAL_DENIED = "approval_denied"
    """An approver refused the operation; nothing was sent."""
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    """The attempt budget ran out; every attempt is known not to have applied."""
    OPERATOR = "operator"
    """An operator resolved the operation as failed."""


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The provider applied the effect.

    Attributes:
        status_code: HTTP status, when the adapter speaks HTTP.
        excerpt: bounded, redacted, valid UTF-8 excerpt of the response.
        remote_id: the provider's id for the effect, when it names one.
    """

    status_code: int | None = None
    excerpt: str = ""
    remote_id: str | None = None


@dataclass(frozen=True, slots=True)
class Accepted:
    """The provider accepted the work; the result comes later by polling or callback.

    Attributes:
        remote_id: the provider's id for the remote operation (required).
        status_code: HTTP status, when the adapter speaks HTTP.
        excerpt: bounded, redacted, valid UTF-8 excerpt of the response.
    """

    remote_id: str
    status_code: int | None = None
    excerpt: str = ""


@dataclass(frozen=True, slots=True)
class Failed:
    """The effect is known not to have happened, or is known to have failed.

    Attributes:
        category: why (``FailureCategory``).
        retryable: whether another attempt could succeed.
        retry_after: the provider's hint in seconds (``Retry-After``), already bounded.
        egress: whether any byte of the request left this process.
        status_code: HTTP status, when there was a response.
        detail: bounded, redacted, valid UTF-8 text for operators.
    """

    category: FailureCategory
    retryable: bool
    retry_after: float | None = None
    egress: bool = True
    status_code: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Ambiguous:
    """Egress may have happened and the response does not say whether it applied.

    Attributes:
        reason: a short machine-readable cause (``timeout``, ``server_error``, ``reset``).
        category: the failure category the response would have had.
        status_code: HTTP status, when there was a response.
        detail: bounded, redacted, valid UTF-8 text for operators.
    """

    reason: str
    category: FailureCategory = FailureCategory.TIMEOUT
    status_code: int | None = None
    detail: str = ""


Outcome = Succeeded | Accepted | Failed | Ambiguous
"""What one egress produced (DESIGN §3, 'outcome')."""


@dataclass(frozen=True, slots=True)
class StillRunning:
    """A poll found the remote operation not done yet, or learned nothing (STYLE rule 5).

    Attributes:
        next_check_after: the provider's hint (``Retry-After``), seconds, already bounded; None
            when it gave none.
        remote_status: the provider's status word (``running``, ``queued``); None when the
            poll got no answer (a timeout, a 5xx): nothing is recorded then.
        detail: bounded, redacted, valid UTF-8 text for logs.
    """

    next_check_after: float | None = None
    remote_status: str | None = None
    detail: str = ""




@dataclass(frozen=True, slots=True)
class CancelConfirmed:
    """The provider says the remote operation is cancelled: record ``Cancelled``.

    Attributes:
        detail: bounded, redacted text of its answer.
    """

    detail: str = ""


@dataclass(frozen=True, slots=True)
class CancelRefused:
    """The provider did not cancel: it refused, the operation completed first, or the cancel
    call failed. Polling goes on and decides the outcome.

    Attributes:
        reason: bounded, redacted text for the ``CancelFailed`` fact.
        retryable: the call itself failed (nothing was decided): ask again at the next poll
            instead of recording ``CancelFailed``.
        status_code: HTTP status, when there was a response.
    """

    reason: str
    retryable: bool = False
    status_code: int | None = None


CancelOutcome = CancelConfirmed | CancelRefused
"""What one remote cancel returned (issue 12 item 4)."""


PollResult = Succeeded | Failed | Ambiguous | CancelConfirmed | StillRunning
"""What one poll of an accepted remote operation returned: a terminal outcome (``Failed``: the
remote operation failed; ``Ambiguous``: the provider lost it; ``CancelConfirmed``: it was
cancelled), or :class:`StillRunning`."""
