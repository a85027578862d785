"""The demo's closing hint names a command the user can run as it stands."""

from __future__ import annotations

import os
import sys

import pytest

from adapters.demo import run


def test_hint_uses_the_path_it_was_started_as_when_opledger_is_not_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [os.path.join(".venv", "bin", "opledger"), "demo"])
    monkeypatch.setattr(run.shutil, "which", lambda name: None)
    assert run._this_command() == os.path.join(".venv", "bin", "opledger")


def test_hint_says_opledger_when_it_is_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [os.path.join(".venv", "bin", "opledger"), "demo"])
    monkeypatch.setattr(run.shutil, "which", lambda name: "/usr/local/bin/opledger")
    assert run._this_command() == "opledger"
