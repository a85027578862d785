"""``opledger archive``: move closed operations into archive segments (``--out DIR``; see
``adapters.cli.archive_run``), and ``opledger archive verify DIR``: check an archive's segments,
hashes and hash chain.

An archive holds closed history moved out of the hot store (``ledger.archives``: segments of
stored records with a manifest each, chained by digest). ``verify`` reads only the directory:
every manifest, every file's SHA-256, size and line count, the counts, the numbering and each
link of the chain. It prints one line per problem and exits 1, or says how much it checked and
exits 0.

Source: issue 29 item 3.
"""

from __future__ import annotations

from pathlib import Path

import typer

from adapters.cli.archive_run import BeforeOption, DryRunOption, NiceOption, OutOption, run
from adapters.cli.common import DatabaseOption, JsonOption, console, counted, fail, print_json, settings
from ledger.archive_check import verify_archive
from ledger.archives import ArchiveError, read_manifest, segments

archive_app = typer.Typer(help="Archive closed operations (--out DIR), check archives, and restore a segment "
                               "for an audit.", no_args_is_help=True, invoke_without_command=True)
_DirectoryArgument = typer.Argument(..., help="the archive directory (holds seg-000001, seg-000002, ...)")


@archive_app.callback()
def archive(
    ctx: typer.Context,
    out: Path | None = OutOption,
    before: str | None = BeforeOption,
    dry_run: bool = DryRunOption,
    nice: float = NiceOption,
    json_output: bool = JsonOption,
    database_url: str = DatabaseOption,
) -> None:
    """Move closed operations older than the retention policy (or --before) into verified
    segments under --out, then remove them from the hot store. Safe to rerun.
    \f

    Args:
        ctx: typer's context (a subcommand such as ``verify`` runs instead).
        out: the archive directory (default: ``OPLEDGER_ARCHIVE_DIR``).
        before: one cutoff for every integration (a time or a duration back from now).
        dry_run: count only.
        nice: seconds of pause per second of work (``adapters.pacing``; 0 runs flat out).
        json_output: print ``{"out", "dry_run", "operations", "records", "segments", "removed",
            "by_integration"}``.
        database_url: the store (default: the configured one).
    """
    if ctx.invoked_subcommand is not None:
        return
    out = out or settings(database_url).archive_dir
    if out is None:
        fail("opledger archive needs --out DIR (the archive directory; default OPLEDGER_ARCHIVE_DIR), or a "
             "subcommand: verify, restore", 2)
    run(out, before, dry_run, json_output, database_url, nice)


@archive_app.command("verify")
def verify(
    directory: Path = _DirectoryArgument,
    json_output: bool = JsonOption,
) -> None:
    """Check every segment of an archive: manifests, file hashes, counts and the hash chain.

    Exits 1 with one line per problem (an edited or removed file, a broken chain link, a missing
    segment, an unfinished one), 0 when everything verifies.
    \f

    Args:
        directory: the archive directory.
        json_output: print ``{"archive", "segments", "records", "problems": [...]}``.
    """
    problems = verify_archive(directory)
    found = segments(directory)
    records = 0
    for _, path in found:
        try:
            stated = read_manifest(path).get("records")
        except ArchiveError:  # an unreadable manifest is already one of the problems
            continue
        records += stated if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0 else 0
    if json_output:
        print_json({"archive": str(directory), "segments": len(found), "records": records, "problems": problems})
    else:
        for line in problems:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if not problems:
            console.print(f"{directory}: {counted(len(found), 'segment')}, {counted(records, 'record')}: verified",
                          markup=False, soft_wrap=True, highlight=False)
    if problems:
        raise typer.Exit(1)
