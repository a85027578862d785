"""``opledger archive restore SEGMENT``: put an archive segment's records back into a store.

For an audit replay: the segment is checked against its manifest, then its records are written
back byte for byte through the store's recorder (``ledger.archive_restore``), into the configured
store or the one ``--database-url`` names (migrated first with ``opledger migrate``). The
projections then fold them as they fold any record, so ``ops show`` and ``ops timeline`` answer
for the restored operations.

Source: issue 29 item 3.
"""

from __future__ import annotations

from pathlib import Path

import typer

from adapters.cli.common import DatabaseOption, JsonOption, UserErrors, console, errors, print_json, settings
from ledger.archive_restore import restore_segment
from ledger.archives import read_manifest

_SegmentArgument = typer.Argument(..., help="a segment directory of an archive (ARCHIVE/seg-000001)")


def restore(
    segment: Path = _SegmentArgument,
    database_url: str = DatabaseOption,
    json_output: bool = JsonOption,
) -> None:
    """Put a segment's records back into a store (this one, or --database-url), for an audit.

    The segment must verify against its manifest; nothing is overwritten (records the store
    already holds with the same bytes are left alone, different ones stop the restore), so a
    restore can be rerun. Prints what was written (a progress bar on a terminal).
    \f

    Args:
        segment: the segment directory.
        database_url: the store to restore into (default: the configured store).
        json_output: print ``{"segment", "aggregates", "written", "present"}``.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from adapters.runtime import open_store

    with UserErrors():
        total = read_manifest(segment).get("records")  # before the store: a mistyped path is named as such
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with open_store(settings(database_url), write=True) as store, Progress(*columns, console=errors,
                                                                                 transient=True) as bar:
            task = bar.add_task(f"restoring {segment.name}", total=total if isinstance(total, int) else None)
            restored = restore_segment(segment, store.app.recorder,
                                       progress=lambda n: bar.update(task, completed=n))
    if json_output:
        print_json({"segment": restored.segment, "aggregates": restored.aggregates, "written": restored.written,
                    "present": restored.present})
    else:
        console.print(f"{restored.segment}: restored {restored.written} records of {restored.aggregates} "
                      f"aggregates ({restored.present} already held)", highlight=False, markup=False)
