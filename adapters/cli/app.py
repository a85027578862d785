"""The ``opledger`` commands."""

from __future__ import annotations

import os
from typing import Any

import typer

from adapters.cli import archive, archive_restore, ops, secret, simulate
from adapters.cli.common import DatabaseOption, JsonOption, UserErrors, console, log_unknown_settings, settings

app = typer.Typer(name="opledger", help="An event-sourced ledger of durable external operations.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        console.print(f"opledger {version('opledger')}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the installed version and exit")) -> None:
    """An event-sourced ledger of durable external operations."""

app.add_typer(ops.ops_app, name="ops")
app.add_typer(ops.projections_app, name="projections")
app.add_typer(secret.secret_app, name="secret")
app.add_typer(archive.archive_app, name="archive")
archive.archive_app.command("restore")(archive_restore.restore)
app.command("attention")(ops.attention)
app.command("resolve")(ops.resolve)
app.command("cancel")(ops.cancel)
app.command("approve")(ops.approve)
app.command("simulate")(simulate.simulate)
app.command("approvals")(ops.approvals)
app.command("evidence")(ops.evidence)


AllowUnreadableOption = typer.Option(
    None, "--allow-unreadable-events",
    help="start even though the store holds ledger event topics this code cannot resolve (written by a "
         "newer version, or a renamed class whose old topic is not registered); their operations wait on "
         "the attention queue as unreadable_event until code that reads them runs "
         "(default: $OPLEDGER_ALLOW_UNREADABLE_EVENTS or off)")


@app.command()
def migrate(database_url: str = DatabaseOption, allow_unreadable_events: bool = AllowUnreadableOption,
            json_output: bool = JsonOption) -> None:
    """Create every table once (the library's and the read models'). Run before any worker.

    Refuses (exit code 2) when the store holds ledger event topics this code cannot resolve,
    unless --allow-unreadable-events."""
    from adapters.runtime import load_app_class
    from migrations import migrate as run_migrations
    from projections.drift import Drift, declaration_drift
    from projections.history import check_readable_history

    config = settings(database_url, allow_unreadable_events=allow_unreadable_events)

    def check(app: Any) -> None:
        check_readable_history(app, allow_unreadable=config.allow_unreadable_events)

    with UserErrors():
        app_class = load_app_class(config.app)
        report = run_migrations(config.database, app_class, check=check)
        # After the read-model migrations: drift reads the status view's due rows and position.
        migrated = app_class(env=config.database.library_env(create_table=False))
        try:
            drifts: list[Drift] = declaration_drift(migrated)
        finally:
            migrated.close()
    if json_output:
        from adapters.cli.common import print_json

        print_json({"store_id": report.store_id, "application": report.app_name, "applied": report.applied,
                    "declaration_drift": [{"integration": d.integration, "version": d.version, "declared": d.declared,
                                           "recorded": dict(d.recorded)} for d in drifts]})
        return
    applied = ", ".join(report.applied) or "nothing (up to date)"
    console.print(f"migrated store {report.store_id} for application {report.app_name!r}: applied {applied}")
    for drift in drifts:
        recorded = ", ".join(f"{digest} ({n} operations)" for digest, n in sorted(drift.recorded.items()))
        console.print(f"warning: declaration {drift.integration} v{drift.version} is {drift.declared} here, but "
                      f"stored operations recorded {recorded}: they are not executed under these rules "
                      "(attention declaration_mismatch; docs/operations.md)", markup=False, highlight=False)


HostOption = typer.Option(None, help="interface to bind (default: $OPLEDGER_HTTP_HOST or 127.0.0.1)")
PortOption = typer.Option(None, min=0, max=65535, help="TCP port (default: $OPLEDGER_HTTP_PORT or 8000)")
PublicOption = typer.Option(False, "--public", help="allow a --host other than loopback, where /metrics and /health "
                            "answer anyone without a token and /metrics labels every tenant "
                            "(default: $OPLEDGER_HTTP_PUBLIC or off)")


@app.command()
def worker(
    database_url: str = DatabaseOption,
    lease_seconds: float = typer.Option(None, help="lease length, seconds"),
    threads: int = typer.Option(None, help="egress threads, for adapters that block (webhook and lro need none)"),
    allow_unreadable_events: bool = AllowUnreadableOption,
    serve: bool = typer.Option(False, "--serve", help="also serve HTTP in this process, as `opledger serve` does "
                               "(callbacks, commands, operator actions, /metrics, the console), sharing the store: "
                               "the way to take callbacks on the embedded SQLite store"),
    host: str = HostOption,
    port: int = PortOption,
    public: bool = PublicOption,
) -> None:
    """Run a worker until SIGTERM/SIGINT: claim, attempt, record, settle, recover. With --serve,
    the HTTP server runs in the same process (--host, --port, --public as for `serve`).

    Refuses to start (exit code 2) when the store holds ledger event topics this code cannot
    resolve, unless --allow-unreadable-events, and when an OPLEDGER_SECRET_<NAME> is shorter than
    8 characters; with --serve also on what `serve` refuses."""
    from adapters.logs import configure_logging
    from adapters.runtime import run_worker, tune_gc_for_worker
    from adapters.trace_export import configure_tracing
    from executors.secrets import check_environment_secrets

    config = settings(database_url, lease_seconds=lease_seconds, worker_threads=threads,
                      allow_unreadable_events=allow_unreadable_events, warn=False)
    configure_logging(config.log_format)
    log_unknown_settings()
    with UserErrors():
        check_environment_secrets(os.environ)  # before the store is opened (issue 27 item 3)
        beside = None
        if serve:
            from adapters.http.serve import http_listener, serve_beside_worker

            beside = serve_beside_worker(http_listener(host=host, port=port, public=public))
        elif (host, port, public) != (None, None, False):
            raise typer.BadParameter("--host, --port and --public need --serve")
        tune_gc_for_worker()
        flush_spans = configure_tracing("opledger-worker")
        try:
            run_worker(config, beside=beside)
        finally:
            flush_spans()


@app.command()
def serve(
    host: str = HostOption,
    port: int = PortOption,
    write: bool = typer.Option(False, "--write", help="SQLite: own the store (operator actions work; no worker "
                               "may run meanwhile: use `opledger worker --serve` for both). PostgreSQL always "
                               "writes."),
    public: bool = PublicOption,
    database_url: str = DatabaseOption,
) -> None:
    """Serve the observe API (/v1, OpenAPI at /openapi.json), operator actions, /metrics, /health (live,
    ready), the console (/console) and providers' signed callbacks (/callbacks/{integration}) until
    SIGINT/SIGTERM. Tokens: OPLEDGER_API_TOKENS (docs/operations.md); callback secrets:
    OPLEDGER_SECRET_CALLBACK_<INTEGRATION> (docs/guide.md, "Callbacks"). On the embedded SQLite
    store, `opledger worker --serve` runs the worker and this server in one process.

    Logs go to stderr (JSON with OPLEDGER_LOG_FORMAT=json); there is no --json output.

    Refuses to start (exit code 2) on a --host other than loopback without --public, an API
    token shorter than 16 characters, or an OPLEDGER_SECRET_<NAME> shorter than 8
    (docs/operations.md, "Settings refused at start")."""
    from adapters.http.serve import http_listener, run_serve
    from adapters.logs import configure_logging
    from adapters.trace_export import configure_tracing

    config = settings(database_url, warn=False)
    configure_logging(config.log_format)
    log_unknown_settings()
    flush_spans = configure_tracing("opledger-serve")
    try:
        with UserErrors():
            run_serve(config, http_listener(host=host, port=port, public=public), write=write)
    finally:
        flush_spans()


@app.command()
def partner(
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(0, help="0 picks a free port"),
    log: str = typer.Option(..., help="SQLite file of the partner's durable request log"),
    secret: str = typer.Option(None, envvar="OPLEDGER_PARTNER_SECRET", help="Standard Webhooks secret"),
    callback_secret: str = typer.Option(None, envvar="OPLEDGER_PARTNER_CALLBACK_SECRET",
                                        help="secret its callbacks are signed with (default: --secret)"),
) -> None:
    """Run the reference partner server (prints its URL when ready). A delivery carrying
    X-Callback-Url is accepted (202) and answered by a signed callback."""
    from adapters.partner import main as partner_main

    args = ["--host", host, "--port", str(port), "--log", log]
    if secret:
        args += ["--secret", secret]
    if callback_secret:
        args += ["--callback-secret", callback_secret]
    raise typer.Exit(partner_main(args))


DemoDatabaseOption = typer.Option(
    None, "--database-url", help="store for the demo; default sqlite:///.opledger/demo.db, recreated each run "
    "($OPLEDGER_DATABASE_URL is not used); a postgresql:// URL without ?schema= runs in schema opledger_demo, "
    "recreated each run; with ?schema= the demo writes into that schema as it is")


@app.command()
def demo(
    database_url: str = DemoDatabaseOption,
    json_output: bool = JsonOption,
    orders: int = typer.Option(12, min=1, max=2000, help="orders to place"),
) -> None:
    """Run the end-to-end demo: partner, orders, a worker killed mid-flight, recovery, summary."""
    from adapters.demo.run import run_demo
    from adapters.processes import Terminated

    settings(database_url)  # the demo's workers inherit OPLEDGER_*: refuse settings that cannot work now
    try:
        with UserErrors():
            code = run_demo(database_url=database_url, as_json=json_output, orders=orders)
    except Terminated:
        code = 128 + 15  # stopped by SIGTERM, its children stopped first (adapters.processes.children_stopped)
    raise typer.Exit(code)


def _store_commands() -> None:
    # Registered here, apart from the commands above (issue 16): doctor, backup, import-json.
    from adapters.cli import store

    app.command("doctor")(store.doctor)
    app.command("backup")(store.backup)
    app.command("import-json")(store.import_json)


_store_commands()


def main() -> None:
    """Console-script entry point."""
    app()
