"""Provenance (issue 31 item 2): where the commit comes from, in order, and the host module digest."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger import provenance
from ledger.errors import ConfigurationError
from ledger.provenance import build_info, module_digest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    build_info.cache_clear()
    yield
    build_info.cache_clear()


def test_the_setting_names_the_commit_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPLEDGER_BUILD_COMMIT", "a" * 40 + "-dirty")
    found = build_info()
    assert (found.commit, found.commit_source) == ("a" * 40 + "-dirty", "setting")


@pytest.mark.parametrize("value", ["main", "ABCDEF1", "abc", "a" * 65, "a" * 40 + "+dirty"])
def test_a_setting_that_is_not_a_commit_id_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPLEDGER_BUILD_COMMIT", value)
    with pytest.raises(ConfigurationError, match="OPLEDGER_BUILD_COMMIT must be a commit id"):
        build_info()


@pytest.mark.parametrize("unset", [None, ""])  # empty: an environment file's ``OPLEDGER_BUILD_COMMIT=`` line
def test_pips_record_of_a_vcs_install_names_the_commit(monkeypatch: pytest.MonkeyPatch, unset: str | None) -> None:
    if unset is None:
        monkeypatch.delenv("OPLEDGER_BUILD_COMMIT", raising=False)
    else:
        monkeypatch.setenv("OPLEDGER_BUILD_COMMIT", unset)
    monkeypatch.setattr(provenance, "_direct_url", lambda: {
        "url": "https://example.com/opledger.git", "vcs_info": {"vcs": "git", "commit_id": "c" * 40}})
    assert (build_info().commit, build_info().commit_source) == ("c" * 40, "pip_vcs")


@pytest.mark.parametrize("direct_url", [
    {},  # not installed by pip (or no record)
    {"url": "file:///somewhere/else", "dir_info": {"editable": True}},  # not this code's directory
    {"url": REPO.as_uri(), "dir_info": {}},  # installed (copied) from the checkout: it may have moved on
    {"url": "https://example.com/opledger-0.1.0.whl", "archive_info": {}},
])
def test_without_a_record_or_a_setting_the_commit_is_unknown(monkeypatch: pytest.MonkeyPatch,
                                                             direct_url: dict[str, Any]) -> None:
    monkeypatch.delenv("OPLEDGER_BUILD_COMMIT", raising=False)
    monkeypatch.setattr(provenance, "_direct_url", lambda: direct_url)
    found = build_info()
    assert (found.commit, found.commit_source) == ("unknown", "unknown")


def test_an_editable_checkout_names_its_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPLEDGER_BUILD_COMMIT", raising=False)
    monkeypatch.setattr(provenance, "_direct_url", lambda: {"url": REPO.as_uri(), "dir_info": {"editable": True}})
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not run from a git checkout")
    found = build_info()
    assert found.commit_source == "git" and found.commit.removesuffix("-dirty") == head.stdout.strip()


def test_the_module_digest_is_the_sha256_of_its_source() -> None:
    path = Path(sys.modules["ledger.provenance"].__file__ or "")
    assert module_digest("ledger.provenance") == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert module_digest("no.such.module") == ""
    assert module_digest("sys") == ""  # built in: no source


def test_an_intent_records_the_build_and_the_application_module_by_default() -> None:
    from tests.apps import ModesApp, Thing

    app = ModesApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    thing = Thing(label="t")
    op = app.intend(thing, "test.idempotent", target="https://partner.test/x", payload={"n": 1})
    assert op.code_digest == module_digest(ModesApp.__module__) != ""
    assert (op.opledger_version, op.opledger_commit) == (build_info().version, build_info().commit)
    mine = app.intend(thing, "test.idempotent", target="https://partner.test/x", payload={"n": 1}, effect_index=1,
                      code_digest="sha256:mine")
    assert mine.code_digest == "sha256:mine"
