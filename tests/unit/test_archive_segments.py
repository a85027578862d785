"""Archive segments: written, read back byte-exact, and every kind of tampering found by verify.

Source: issue 29 items 2 and 3 (segments with manifests and a hash chain; ``archive verify``).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.archive_check import verify_archive
from ledger.archives import (
    FILES,
    ArchiveError,
    StoredRecord,
    manifest_digest,
    read_manifest,
    read_records,
    segment_name,
    write_segment,
)
from ledger.errors import NaiveDatetimeError

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PROVENANCE = {"identity": "store-1", "schema": 7, "codec": 2, "version": "0.9.0", "commit": "abc123"}


def records(seed: int, count: int = 3) -> list[StoredRecord]:
    # States that are not UTF-8 and contain newlines: the archive must keep bytes, not text.
    return [StoredRecord(UUID(int=seed), v, "ledger.operation:Operation.Intended", bytes([seed, v, 0xFF, 10, 0]))
            for v in range(1, count + 1)]


def write(archive: Path, seed: int) -> Path:
    rows = records(seed)
    return write_segment(archive, records=rows, decoded=[{"id": str(r.originator_id), "version": r.originator_version}
                                                         for r in rows],
                         statuses=[{"id": str(UUID(int=seed)), "kind": "operation", "status": "settled"}],
                         written_at=AT, provenance=PROVENANCE).path


def test_segments_are_numbered_chained_and_read_back_byte_exact(tmp_path: Path) -> None:
    first, second = write(tmp_path, 1), write(tmp_path, 2)
    assert (first.name, second.name) == ("seg-000001", "seg-000002")
    assert read_records(first) == records(1)  # what a restore writes back: the stored bytes
    manifest = read_manifest(second)
    assert manifest["previous"].startswith("sha256:") and read_manifest(first)["previous"] is None
    assert (manifest["records"], manifest["aggregates"], manifest["store"]["identity"],
            manifest["opledger"]["commit"]) == (3, 1, "store-1", "abc123")
    assert verify_archive(tmp_path) == []


@pytest.mark.parametrize(("tamper", "says"), [
    (lambda a: (a / "seg-000001" / "records.jsonl").write_bytes(
        (a / "seg-000001" / "records.jsonl").read_bytes().replace(b'"version":2', b'"version":9')),
     "seg-000001: records.jsonl was changed"),
    (lambda a: (a / "seg-000002" / "status.jsonl").unlink(), "seg-000002: status.jsonl is missing"),
    (lambda a: shutil.rmtree(a / "seg-000002"), "seg-000002: missing (the archive jumps to seg-000003)"),
    (lambda a: (a / "seg-000001" / "manifest.json").write_bytes(
        (a / "seg-000001" / "manifest.json").read_bytes().replace(b"abc123", b"abc124")),
     "seg-000002: the chain is broken"),
    (lambda a: (a / "seg-000003" / "manifest.json").write_text("{not json"), "seg-000003: manifest.json cannot be read"),
    (lambda a: (a / "seg-000004.partial").mkdir(), "seg-000004.partial: an unfinished segment"),
])
def test_verify_names_each_kind_of_tampering(tmp_path: Path, tamper, says: str) -> None:
    for seed in (1, 2, 3):
        write(tmp_path, seed)
    tamper(tmp_path)
    problems = verify_archive(tmp_path)
    assert any(line.startswith(says) for line in problems), problems


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=st.integers(1, 2), name=st.sampled_from(FILES + ("manifest.json",)), where=st.floats(0, 1),
       flip=st.integers(1, 255))
def test_any_flipped_byte_is_found(tmp_path_factory: pytest.TempPathFactory, segment: int, name: str, where: float,
                                   flip: int) -> None:
    archive = tmp_path_factory.mktemp("archive")
    recorded = {n: write_segment_digest(archive, n) for n in (1, 2)}  # as the store's index keeps them
    target = archive / segment_name(segment) / name
    data = bytearray(target.read_bytes())
    data[min(int(where * len(data)), len(data) - 1)] ^= flip
    target.write_bytes(bytes(data))
    assert verify_archive(archive, recorded), f"a flipped byte in {segment_name(segment)}/{name} went unnoticed"


def write_segment_digest(archive: Path, seed: int) -> str:
    return manifest_digest(write(archive, seed))


def test_the_stores_record_anchors_the_head_and_finds_a_segment_removed_from_the_end(tmp_path: Path) -> None:
    recorded = {n: write_segment_digest(tmp_path, n) for n in (1, 2)}
    head = tmp_path / "seg-000002" / "manifest.json"
    head.write_bytes(head.read_bytes().replace(b"2026-12-05", b"2026-12-06"))  # parses, same hashes
    assert verify_archive(tmp_path) == []  # on its own, the head's own statements are all it has
    assert verify_archive(tmp_path, recorded) == [
        f"seg-000002: its manifest is not the one the store recorded ({recorded[2]})"]
    shutil.rmtree(tmp_path / "seg-000002")
    assert verify_archive(tmp_path, recorded) == ["seg-000002: missing (the store recorded it as archived)"]


def test_a_killed_writers_partial_segment_is_redone(tmp_path: Path) -> None:
    write(tmp_path, 1)
    leftover = tmp_path / "seg-000002.partial"
    leftover.mkdir()
    (leftover / "records.jsonl").write_bytes(b"half a line")
    assert write(tmp_path, 2).name == "seg-000002"
    assert not leftover.exists() and verify_archive(tmp_path) == []


def test_mismatched_inputs_and_naive_times_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="must match one for one"):
        write_segment(tmp_path, records=records(1), decoded=[], statuses=[], written_at=AT, provenance={})
    with pytest.raises(NaiveDatetimeError):
        write_segment(tmp_path, records=[], decoded=[], statuses=[], written_at=datetime(2026, 1, 1),
                      provenance={})
    assert verify_archive(tmp_path / "nowhere") == [f"{tmp_path / 'nowhere'}: no such archive directory"]


def test_the_cli_verifies_and_names_each_problem_with_exit_code_1(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from adapters.cli.app import app

    for seed in (1, 2):
        write(tmp_path, seed)
    runner = CliRunner()
    good = runner.invoke(app, ["archive", "verify", str(tmp_path)])
    assert good.exit_code == 0 and "2 segments, 6 records: verified" in good.output
    (tmp_path / "seg-000001" / "decoded.jsonl").unlink()
    bad = runner.invoke(app, ["archive", "verify", str(tmp_path), "--json"])
    assert bad.exit_code == 1
    assert json.loads(bad.output)["problems"] == ["seg-000001: decoded.jsonl is missing"]
    write(tmp_path / "one", 1)
    one = runner.invoke(app, ["archive", "verify", str(tmp_path / "one")])
    assert one.exit_code == 0 and "1 segment, 3 records: verified" in one.output, one.output


@pytest.mark.parametrize("nice", ["nan", "inf", "-1", "101"])
def test_a_pace_out_of_range_is_refused_in_one_line_naming_it(tmp_path: Path, nice: str) -> None:
    from typer.testing import CliRunner

    from adapters.cli.app import app

    result = CliRunner().invoke(app, ["archive", "--out", str(tmp_path), "--nice", nice, "--dry-run"])
    assert result.exit_code == 2
    said = " ".join(result.output.replace("│", " ").split())
    assert f"must be a number from 0 to 100 (seconds of pause per second of work), got {float(nice)}" in said, said


def _manifest_with(archive: Path, **members: object) -> None:
    path = archive / "seg-000001" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **members}))


@pytest.mark.parametrize(("damage", "says"), [
    (lambda a: ((a / "seg-000001" / "manifest.json").unlink(), (a / "seg-000001" / "manifest.json").mkdir()),
     "seg-000001: manifest.json is not a regular file"),
    (lambda a: (os.mkfifo(a / "seg-000002" / "status.jsonl.fifo"),
                (a / "seg-000002" / "status.jsonl").unlink(),
                os.rename(a / "seg-000002" / "status.jsonl.fifo", a / "seg-000002" / "status.jsonl")),
     "seg-000002: status.jsonl is not a regular file"),  # a FIFO would block a reader forever
    (lambda a: _manifest_with(a, records="abc"), "seg-000001: the manifest's records and aggregates must be counts"),
    (lambda a: _manifest_with(a, records=1e300), "seg-000001: the manifest's records and aggregates must be counts"),
    (lambda a: (a / "seg-000001" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000),
     "seg-000001: manifest.json cannot be read"),
    (lambda a: (a / "seg-000001" / "manifest.json").write_bytes(b" " * (2 << 20)),
     "seg-000001: manifest.json is larger than"),
    (lambda a: (a / "seg-000009").write_text("x"), "seg-000009: not a directory, where a segment should be"),
    (lambda a: (a / "seg-1").mkdir(), "seg-1: not a segment name"),
])
def test_hostile_archives_are_problems_never_exceptions(tmp_path: Path, damage, says: str) -> None:
    for seed in (1, 2):
        write(tmp_path, seed)
    damage(tmp_path)
    problems = verify_archive(tmp_path)
    assert any(line.startswith(says) for line in problems), problems


def test_a_gap_is_reported_once_and_the_segments_after_it_still_chain(tmp_path: Path) -> None:
    for seed in (1, 2, 3, 4):
        write(tmp_path, seed)
    shutil.rmtree(tmp_path / "seg-000002")
    assert verify_archive(tmp_path) == ["seg-000002: missing (the archive jumps to seg-000003)"]


def test_a_directory_that_is_not_an_archive_does_not_verify(tmp_path: Path) -> None:
    assert verify_archive(tmp_path) == [f"{tmp_path}: holds no segments (is this the archive directory?)"]
    (tmp_path / "file").write_text("x")
    assert verify_archive(tmp_path / "file")[0].startswith(f"{tmp_path / 'file'}: not a directory")
