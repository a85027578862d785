"""Operator commands: inspect operations, the attention and approval queues, record decisions.

Reads and decisions go through ``adapters.operator``, as the HTTP API's do. Every command takes
``--json``; writes print what was recorded. Exit codes: 0 ok, 1 the action was refused or failed,
2 usage, configuration or not found.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import typer
from rich.table import Table

from adapters.archive_attention import KIND_ARCHIVED, acknowledge_late
from adapters.archive_reads import show_any, timeline_any
from adapters.cli.common import (
    DatabaseOption,
    JsonOption,
    UserErrors,
    WideOption,
    cell,
    console,
    errors,
    fail,
    print_json,
    print_table,
    settings,
)
from adapters.operator import OperatorAction, perform
from adapters.receipt_attention import KIND_OPERATION, KIND_RECEIPT, attention_queue, load_receipt, perform_on_receipt
from ledger.codec import LEDGER_TOPIC_PREFIX
from ledger.errors import OperationInArchiveError, OperationNotFoundError
from ledger.status import ExecutionState, Status
from migrations.drivers import driver_of
from projections.rows import StatusRow, read_topics
from projections.status import PROJECTION_NAME, StatusProjection
from projections.view import OperationFilter

if TYPE_CHECKING:
    from adapters.runtime import Store

ops_app = typer.Typer(help="Inspect operations.", no_args_is_help=True)
projections_app = typer.Typer(help="Maintain read models.", no_args_is_help=True)

ROW_COLUMNS = ("operation_id", "integration", "status", "execution", "attempts", "attention", "updated_at")
ATTENTION_COLUMNS = ("operation_id", "integration", "attention", "attention_detail", "ambiguity_reason",
                     "failure_category", "attempts", "updated_at")
RECEIPT_COLUMNS = ("receipt_id", "command", "attention", "attention_detail", "principal", "updated_at")
LATE_COLUMNS = ("operation_id", "integration", "attention", "attention_detail", "updated_at")
APPROVAL_COLUMNS = ("operation_id", "integration", "tenant", "source_entity_type", "source_entity_id", "created_at")
LAG_SCAN = 10_000  # ledger records counted past the view's position before saying "at least"


def _store(database_url: str | None, *, write: bool = False) -> AbstractContextManager[Store]:
    from adapters.runtime import open_store

    return open_store(settings(database_url), write=write)


def _uuid(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        fail(f"{text!r} is not an operation id (a UUID)")


def _rows_table(rows: list[StatusRow] | list[dict[str, Any]], title: str, columns: tuple[str, ...] = ROW_COLUMNS,
                caption: str | None = None) -> Table:
    table = Table(title=title, caption=caption)
    for column in columns:
        table.add_column(column, no_wrap=column.endswith("_id"))
    for row in rows:
        data = dict(row) if isinstance(row, dict) else row.as_json()
        data["attention_detail"] = _detail_text(data["attention_detail"])
        table.add_row(*(cell(data[c]) for c in columns))
    return table


def _detail_text(detail: dict[str, Any] | None) -> str | None:
    """An attention detail on one line: ``topic=... version=4 position=123`` (the error last)."""
    if not detail:
        return None
    return " ".join(f"{key}={value}" for key, value in detail.items() if value is not None)


def _budgets_text(budgets: list[dict[str, Any]]) -> str | None:
    """Each call budget level on a line: ``tenant t.x|tenant=acme: 2/2 calls in 10 s window to
    <end>, waiting until <end>`` (outermost first)."""
    if not budgets:
        return None
    lines = []
    for b in budgets:
        wait = f", waiting until {b['waiting_until']}" if b["waiting_until"] else ""
        lines.append(f"{b['level']} {b['scope']}: {b['calls_used']}/{b['calls_per_window']} calls in the "
                     f"{b['window_seconds']:g} s window to {b['window_end']}{wait}")
    return "\n".join(lines)


def _warn_lag(store: Store) -> None:
    """Say on stderr how far the status view is behind the log (no worker keeping it, say)."""
    position = store.view.position(PROJECTION_NAME, store.app.name)
    behind = len(driver_of(store.app).records_list_after(position, LAG_SCAN, read_topics(), {},
                                                        prefix=LEDGER_TOPIC_PREFIX))
    if behind:
        more = "at least " if behind >= LAG_SCAN else ""
        errors.print(f"note: the status view is {more}{behind} ledger event(s) behind the log; a running worker "
                     "(or `opledger serve` owning the store) brings it up to date", highlight=False)


MAX_ROWS = 100_000
"""The most rows a listing asks the status view for (``OperationFilter.limit``)."""


def _one_more(limit: int) -> int:
    """Rows to ask for so that :func:`_first` can tell whether more matched than ``limit``."""
    return min(limit + 1, MAX_ROWS)


def _first(rows: list[Any], limit: int) -> list[Any]:
    """The first ``limit`` of ``rows`` (asked for with :func:`_one_more`), saying on stderr when
    more matched: a script reading the listing must not take a page for the whole."""
    if len(rows) > limit:
        errors.print(f"note: showing the first {limit:,}; more match (--limit up to {MAX_ROWS:,})", highlight=False)
    return rows[:limit]


def _choice(value: str | None, allowed: list[str], what: str) -> None:
    if value is not None and value not in allowed:
        fail(f"unknown {what} {value!r}; one of: {', '.join(allowed)}")


@ops_app.command("list")
def list_ops(
    status: str = typer.Option(None, help="only this status; an outcome (failed, succeeded, ambiguous, "
                               "cancelled) also finds those already settled"),
    outcome: str = typer.Option(None, help="only this execution outcome, settled or not"),
    integration: str = typer.Option(None, help="only this integration"),
    tenant: str = typer.Option(None, help="only this tenant"),
    attention: str = typer.Option(None, help="only this attention reason ('*': any)"),
    limit: int = typer.Option(100, min=1, max=MAX_ROWS),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
    wide: bool = WideOption,
) -> None:
    """List operations, newest first (the first --limit; stderr says when more match)."""
    _choice(status, [s.value for s in Status], "status")
    _choice(outcome, [s.value for s in ExecutionState], "outcome")
    where = OperationFilter(status=status, outcome=outcome, integration=integration, tenant=tenant,
                            attention=attention, limit=_one_more(limit))
    with UserErrors(), _store(database_url) as store:
        rows = _first(store.queries.search(where), limit)
        _warn_lag(store)
    if json_output:
        print_json([r.as_json() for r in rows])
    else:
        print_table(_rows_table(rows, f"operations ({len(rows)})"), wide=wide)


ArchiveDirOption = typer.Option(None, "--archive-dir", help="the archive directory: an archived operation is read "
                                "from its segment there (default: OPLEDGER_ARCHIVE_DIR; unset: its segment is named)")


@ops_app.command("show")
def show_op(operation_id: str, database_url: str = DatabaseOption, json_output: bool = JsonOption,
            wide: bool = WideOption, archive_dir: Path | None = ArchiveDirOption) -> None:
    """Show one operation: status, execution and settlement, outcome, approval, source, trace
    (payload fields not classified public are redacted). An archived one is read from its
    segment under --archive-dir (its segment is named without one)."""
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url) as store:
        data = show_any(store, op_id, archive_dir or store.settings.archive_dir)
    if json_output:
        print_json(data)
        return
    table = Table(show_header=False, title=f"operation {op_id}")
    for key, value in data.items():
        text = _detail_text(value) if key in ("attention_detail", "archived") else \
            _budgets_text(value) if key == "budgets" else value
        table.add_row(key, cell(text))
    print_table(table, wide=wide)


@ops_app.command("timeline")
def timeline(operation_id: str, database_url: str = DatabaseOption, json_output: bool = JsonOption,
             wide: bool = WideOption, archive_dir: Path | None = ArchiveDirOption) -> None:
    """Show the operation's own events, oldest first (secrets never shown). An archived one is
    read from its segment under --archive-dir (its segment is named without one)."""
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url) as store:
        entries = timeline_any(store, op_id, archive_dir or store.settings.archive_dir)
    if json_output:
        print_json(entries)
        return
    table = Table(title=f"timeline of {op_id}")
    for column in ("#", "at", "event", "details"):
        table.add_column(column)
    for entry in entries:
        details = ", ".join(f"{k}={v}" for k, v in entry["details"].items())
        table.add_row(cell(entry["version"]), cell(entry["at"]), cell(entry["event"]), cell(details))
    print_table(table, wide=wide)


def attention(limit: int = typer.Option(100, min=1, max=MAX_ROWS), database_url: str = DatabaseOption,
              json_output: bool = JsonOption, wide: bool = WideOption) -> None:
    """The operator attention queue: why automated progress stopped, oldest first. Operations,
    the keyed commands whose receipt recovery gave up on (receipt_stuck; resolve them with
    `opledger resolve RECEIPT_ID --resolution retry|abandon --evidence ...`), and archived
    operations a provider reported on late (late_after_archive; `--resolution acknowledge`)."""
    with UserErrors(), _store(database_url) as store:
        rows = _first(attention_queue(store, _one_more(limit)), limit)
        _warn_lag(store)
    if json_output:
        print_json(rows)
        return
    operations = [r for r in rows if r["kind"] == KIND_OPERATION]
    receipts = [r for r in rows if r["kind"] == KIND_RECEIPT]
    archived = [r for r in rows if r["kind"] == KIND_ARCHIVED]
    print_table(_rows_table(operations, f"needs attention ({len(operations)})", ATTENTION_COLUMNS), wide=wide)
    if receipts:
        print_table(_rows_table(receipts, f"keyed commands needing attention ({len(receipts)})", RECEIPT_COLUMNS,
                                caption="opledger resolve RECEIPT_ID --resolution retry|abandon --evidence \"...\""),
                    wide=wide)
    if archived:
        print_table(_rows_table(archived, f"archived operations with late records ({len(archived)})", LATE_COLUMNS,
                                caption="opledger resolve OPERATION_ID --resolution acknowledge --evidence \"...\""),
                    wide=wide)


def approvals(limit: int = typer.Option(100, min=1, max=MAX_ROWS), database_url: str = DatabaseOption,
              json_output: bool = JsonOption, wide: bool = WideOption) -> None:
    """Operations waiting for an approver (their integration requires approval), newest first.

    Approve with `opledger approve ID`, refuse with `opledger approve ID --deny --reason ...`;
    one left waiting fails when its pending deadline passes."""
    with UserErrors(), _store(database_url) as store:
        rows = _first(store.queries.search(OperationFilter(status="pending", approval="required",
                                                        limit=_one_more(limit))), limit)
        _warn_lag(store)
    if json_output:
        print_json([r.as_json() for r in rows])
    else:
        print_table(_rows_table(rows, f"awaiting approval ({len(rows)})", APPROVAL_COLUMNS), wide=wide)


def _act(database_url: str | None, operation_id: str, action: OperatorAction, json_output: bool) -> None:
    op_id = _uuid(operation_id)
    with UserErrors(), _store(database_url, write=True) as store:
        try:
            result = perform(store, op_id, action)
        except OperationInArchiveError:
            # An archived operation's late records are acknowledged by its id (late_after_archive).
            if (action.kind, action.resolution) != ("resolve", "acknowledge"):
                raise
            done = acknowledge_late(store, op_id, principal=action.principal, evidence=action.evidence)
            if json_output:
                print_json(done)
            else:
                console.print(f"operation {op_id} (archived): acknowledged {done['acknowledged']} late record(s)",
                              highlight=False, soft_wrap=True)
            return
        except OperationNotFoundError:
            # A receipt recovery gave up on is resolved by its id too (attention receipt_stuck).
            if action.kind != "resolve" or load_receipt(store.app, op_id) is None:
                raise
            _print_receipt_result(perform_on_receipt(store, op_id, principal=action.principal,
                                                     resolution=action.resolution, evidence=action.evidence),
                                  json_output)
            return
    if json_output:
        print_json(result)
        return
    events = ", ".join(entry["event"] for entry in result["recorded"]) or "nothing new (already recorded)"
    console.print(f"operation {op_id}: recorded {events}; status {result['status']}", highlight=False)
    if action.kind == "cancel" and result["status"] in _CANCEL_NEXT:
        console.print(_CANCEL_NEXT[result["status"]], highlight=False)


def _print_receipt_result(result: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(result)
        return
    events = ", ".join(entry["event"] for entry in result["recorded"])
    after = ("recovery adopts it again at once" if result["resolution"] == "retry"
             else "a retry with its key is answered 409 command_abandoned")
    console.print(f"receipt {result['receipt_id']}: recorded {events}; {after}", highlight=False)


_CANCEL_NEXT = {
    "pending": "next: a worker records Cancelled; nothing is sent",
    "claimed": "next: the worker holding it records Cancelled before any egress",
    "dispatching": "next: the attempt on the wire ends first and its outcome is recorded; accepted work is then "
                   "cancelled at the provider, a retry is cancelled, a success or failure stands",
    "accepted": "next: a worker asks the provider to cancel; it records Cancelled, or CancelFailed (attention "
                "cancel_failed) and then whatever the provider reports; a success that wins the race stands",
}
"""What happens after ``opledger cancel``, by the status it left the operation in (ADR 0004)."""


def resolve(
    operation_id: str,
    resolution: str = typer.Option(
        ..., help="succeeded | failed | retry | abandon | retry_settlement | acknowledge (a late observation) | "
                  "retry_write (a refused write); for a receipt: retry | abandon"),
    evidence: str = typer.Option(..., help="what you checked (shown on the timeline)"),
    principal: str = typer.Option("operator", help="who decides"),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Record an operator's decision on an ambiguous operation or a blocked settlement, or on a
    keyed command's receipt that recovery gave up on (receipt_stuck: retry | abandon)."""
    _act(database_url, operation_id, OperatorAction("resolve", principal, resolution=resolution, evidence=evidence),
         json_output)


def cancel(
    operation_id: str,
    reason: str = typer.Option("", help="why"),
    principal: str = typer.Option("operator"),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Request cancellation (CancelRequested): before egress a worker records Cancelled; accepted work is
    cancelled at the provider (Cancelled or CancelFailed). Prints what was recorded and what comes next."""
    _act(database_url, operation_id, OperatorAction("cancel", principal, reason=reason), json_output)


RoleOption = typer.Option(None, "--role", help="the approver's roles (the default policy needs 'approver')")


def approve(
    operation_id: str,
    deny: bool = typer.Option(False, "--deny", help="refuse instead of approving"),
    reason: str = typer.Option("", help="why (required with --deny)"),
    principal: str = typer.Option("operator"),
    role: list[str] = RoleOption,
    fingerprint: str = typer.Option(None, help="the fingerprint you reviewed (ops show); refused if it changed"),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Approve (or --deny) an operation whose integration requires approval. The approval is
    bound to the operation's fingerprint, the declaration's purpose and expires after its
    ``approval_valid_seconds``; the policy (OPLEDGER_APPROVAL_POLICY, default: the 'approver'
    role, no self-approval) decides who may approve."""
    if deny and not reason:
        fail("--deny needs --reason")
    action = (OperatorAction("deny", principal, reason=reason) if deny else
              OperatorAction("approve", principal, roles=tuple(role or ()), fingerprint=fingerprint))
    _act(database_url, operation_id, action, json_output)


def evidence(
    target: str = typer.Argument(..., metavar="ID|verify", help="an operation id, or 'verify'"),
    file: str = typer.Argument(None, metavar="[FILE]", help="with verify: the evidence file"),
    out: str = typer.Option(None, "--out", help="write the document here instead of stdout"),
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Export an operation's evidence (`opledger evidence ID [--out FILE]`): a self-describing JSON
    document with the redacted timeline and each record's sha256; or check one against the store
    (`opledger evidence verify FILE`: exit 0 when it still matches, 1 when a record differs)."""
    from pathlib import Path

    from adapters.evidence import dumps, export
    from adapters.evidence import verify as verify_document

    if target == "verify":
        if file is None:
            fail("evidence verify needs the FILE to check")
        try:
            document = json.loads(Path(file).read_text())
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            fail(f"cannot read {file}: {exc}")
        with UserErrors(), _store(database_url) as store:
            report = verify_document(store, document)
        if json_output:
            print_json(report)
        else:
            verdict = "matches the store" if report["matches"] else "DOES NOT match the store"
            console.print(f"evidence of operation {report['operation_id']}: {verdict} "
                          f"({report['checked']} records checked)", highlight=False)
            for problem in report["problems"]:
                console.print("  " + ", ".join(f"{k}={v}" for k, v in problem.items()), highlight=False)
        raise typer.Exit(0 if report["matches"] else 1)
    op_id = _uuid(target)
    with UserErrors(), _store(database_url) as store:
        text = dumps(export(store, op_id))
    if out is None:
        sys.stdout.write(text)
        return
    Path(out).write_text(text)
    if json_output:
        print_json({"operation_id": str(op_id), "out": out, "bytes": len(text.encode())})
    else:
        console.print(f"wrote the evidence of operation {op_id} to {out}", highlight=False)


@projections_app.command("rebuild")
def rebuild(database_url: str = DatabaseOption, json_output: bool = JsonOption) -> None:
    """Rebuild the status and metrics projections from the whole log, each swapped in at once
    (a progress bar on a terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from projections.loading import stored_ledger_topics
    from projections.metrics import MetricsProjection
    from projections.metrics_store import MetricsStore

    started = time.monotonic()  # elapsed time only
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with UserErrors(), _store(database_url, write=True) as store, Progress(*columns, console=errors,
                                                                             transient=True) as bar:
        total = sum(stored_ledger_topics(store.app, read_topics()).values())  # one scan, for the bar
        status_task = bar.add_task("status projection", total=total)
        status_events = StatusProjection(app=store.app, view=store.view).rebuild(
            progress=lambda n: bar.update(status_task, completed=n))
        bar.update(status_task, completed=total)
        metrics_task = bar.add_task("metrics projection", total=total)
        metrics_events = MetricsProjection(app=store.app, store=MetricsStore(store.view)).rebuild(
            progress=lambda n: bar.update(metrics_task, completed=n))
        bar.update(metrics_task, completed=total)
    seconds = time.monotonic() - started
    if json_output:
        print_json({"status_events": status_events, "metrics_events": metrics_events, "seconds": seconds})
    else:
        console.print(f"rebuilt the status projection from {status_events} events and the metrics projection "
                      f"from {metrics_events} events in {seconds:.1f} s")
