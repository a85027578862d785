"""Whose problem a refused write is (``ledger.refusals.refusal_scope``, one table), how a failed
save is classified (``ledger.outages.save_fault``) and what is kept of the database's text
(``ledger.refusals.refusal_text``). Source: issue 35 item 1."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, InternalError, OperationalError, ProgrammingError

from ledger.outages import SaveFault, save_fault
from ledger.redaction import KNOWN_SECRETS
from ledger.refusals import MAX_REFUSAL_CHARS, RefusalScope, refusal_scope, refusal_text

S = RefusalScope

SCOPES = [
    # (other writes of the batch accepted, probe refused, scope)
    (0, None, S.PROBE),  # nothing else written: ask the store
    (0, False, S.OPERATION),  # the store takes a probe write: that operation's
    (0, True, S.STORE),  # it takes nothing: the store's
    (1, None, S.OPERATION),  # another operation's write went in
    (40, None, S.OPERATION),
    (3, True, S.STORE),  # never asked so in practice; a refused probe always means the store
]


@pytest.mark.parametrize(("accepted", "probe_refused", "scope"), SCOPES)
def test_refusal_scope(accepted: int, probe_refused: bool | None, scope: RefusalScope) -> None:
    assert refusal_scope(accepted=accepted, probe_refused=probe_refused) is scope


def _wrapped(wrapper: type[Exception], cause: BaseException) -> Exception:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise wrapper(str(exc)) from exc
    except Exception as exc:
        return exc
    raise AssertionError("unreachable")


class _Diag:
    def __init__(self, constraint_name: str | None = None, sqlstate: str | None = None,
                 message_primary: str | None = None) -> None:
        self.constraint_name = constraint_name
        self.sqlstate = sqlstate
        self.message_primary = message_primary


class _Unique(psycopg.errors.UniqueViolation):
    def __init__(self, constraint: str | None) -> None:
        super().__init__("duplicate key")
        self._diag = _Diag(constraint)

    @property
    def diag(self) -> _Diag:  # type: ignore[override]
        return self._diag


FAULTS = [
    (IntegrityError("conflict"), SaveFault.CONFLICT),  # the in-memory recorder's own
    (_wrapped(IntegrityError, _Unique("orders_events_pkey")), SaveFault.CONFLICT),
    (_wrapped(IntegrityError, _Unique("orders_events_custom_idx")), SaveFault.REFUSED),
    (_wrapped(IntegrityError, psycopg.errors.CheckViolation("check")), SaveFault.REFUSED),
    (_wrapped(IntegrityError, sqlite3.IntegrityError("UNIQUE constraint failed: stored_events.originator_id")),
     SaveFault.CONFLICT),
    (_wrapped(IntegrityError, sqlite3.IntegrityError("refused by test trigger")), SaveFault.REFUSED),
    (_wrapped(InternalError, psycopg.errors.RaiseException("refused")), SaveFault.REFUSED),
    (_wrapped(ProgrammingError, psycopg.errors.InsufficientPrivilege("permission denied")), SaveFault.REFUSED),
    (_wrapped(OperationalError, psycopg.errors.AdminShutdown("terminating")), SaveFault.OUTAGE),
    (_wrapped(OperationalError, sqlite3.OperationalError("database is locked")), SaveFault.OUTAGE),
    (_wrapped(OperationalError, sqlite3.OperationalError("attempt to write a readonly database")), SaveFault.REFUSED),
    (TypeError("the codec cannot encode this"), SaveFault.UNSTORABLE),
]


@pytest.mark.parametrize(("error", "fault"), FAULTS, ids=[f"{type(e).__name__}-{f}" for e, f in FAULTS])
def test_save_fault(error: Exception, fault: SaveFault) -> None:
    assert save_fault(error) is fault


def test_refusal_text_keeps_the_first_line_bounded_and_redacted() -> None:
    KNOWN_SECRETS.add("tok_refusal_secret_1")
    cause = sqlite3.IntegrityError("refused: tok_refusal_secret_1 " + "x" * 5000 + "\nDETAIL: the whole row")
    text = refusal_text(_wrapped(IntegrityError, cause))
    assert "tok_refusal_secret_1" not in text and "DETAIL" not in text
    assert text.startswith("refused: ") and len(text) <= MAX_REFUSAL_CHARS


def test_refusal_text_names_the_sqlstate() -> None:
    class Raised(psycopg.errors.RaiseException):
        @property
        def diag(self) -> _Diag:  # type: ignore[override]
            return _Diag(sqlstate="P0001", message_primary="refused by trigger")

    assert refusal_text(_wrapped(InternalError, Raised("refused by trigger\nCONTEXT: ..."))) == "P0001: refused by trigger"
