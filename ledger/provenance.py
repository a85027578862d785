"""Provenance: which opledger (version and commit) recorded an intent, and which host module
intended it (its digest).

The commit opledger was built from is found once per process, in this order:

1. ``OPLEDGER_BUILD_COMMIT``, when set: the deployment says it (a wheel or an image built
   without ``.git``; set it from the build, e.g. ``--build-arg`` of ``git rev-parse HEAD``).
2. pip's install record (``direct_url.json``, PEP 610, written by pip into the installed
   package's metadata): ``vcs_info.commit_id`` of ``pip install git+https://...@REV``.
3. An editable install from a checkout (``pip install -e .``, what CI does on a fresh clone):
   ``git rev-parse HEAD`` in the directory pip recorded, with ``-dirty`` appended when tracked
   files differ from it, so the commit never claims code it does not hold.
4. Otherwise ``unknown``.

Why not a file written by a build hook: the build backend is stock setuptools, and an editable
install does not rebuild, so a generated file would name the commit of the first install after
every later ``git checkout``. pip's own metadata and git itself are always current; the setting
covers every install that has neither.

The host module digest is ``sha256:`` over the source bytes of the module that declares the
application's integrations (its class's module), computed once at the application's start
(``LedgerApplication.__init__``) and recorded on every intent that does not give its own
``code_digest``.

Source: issue 31 item 2 ("Provenance"); PEP 610 (``direct_url.json``); DESIGN §1.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ledger.errors import ConfigurationError

__all__ = ["UNKNOWN", "BuildInfo", "ProvenanceSettings", "build_info", "module_digest"]

DISTRIBUTION = "opledger"
UNKNOWN = "unknown"
GIT_TIMEOUT_SECONDS = 5.0
"""How long one ``git`` call may take, seconds; a slower one counts as no answer."""


class ProvenanceSettings(BaseSettings):
    """``OPLEDGER_BUILD_COMMIT``: the commit opledger was built from, for installs that carry
    no record of it (a wheel, an image without ``.git``). A hex object name, 7 to 64 digits,
    optionally ending ``-dirty``. Set but empty counts as unset (an environment file's
    ``OPLEDGER_BUILD_COMMIT=`` line, a build that had no commit to give)."""

    model_config = SettingsConfigDict(env_prefix="OPLEDGER_", extra="ignore", env_ignore_empty=True)

    build_commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,64}(-dirty)?$")


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """What an intent and an evidence document say about the opledger that wrote them.

    Attributes:
        version: the installed distribution's version (``unknown`` when not installed).
        commit: the commit it was built from, ``<hex>`` or ``<hex>-dirty``, or ``unknown``.
        commit_source: where the commit came from: ``setting`` (``OPLEDGER_BUILD_COMMIT``),
            ``pip_vcs`` (pip's record of a VCS install), ``git`` (an editable checkout) or
            ``unknown``.
    """

    version: str
    commit: str
    commit_source: str


@cache
def build_info() -> BuildInfo:
    """The running opledger's version and commit, found once per process (see the module).

    Raises:
        ConfigurationError: ``OPLEDGER_BUILD_COMMIT`` is set but is not a commit id.
    """
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = UNKNOWN
    try:
        setting = ProvenanceSettings().build_commit
    except ValidationError:
        raise ConfigurationError("OPLEDGER_BUILD_COMMIT must be a commit id (7 to 64 lower-case hex digits, "
                                 "optionally ending -dirty), e.g. the output of `git rev-parse HEAD`") from None
    if setting:
        return BuildInfo(version, setting, "setting")
    direct_url = _direct_url()
    vcs_info = direct_url.get("vcs_info")
    commit = vcs_info.get("commit_id") if isinstance(vcs_info, dict) else None
    if isinstance(commit, str) and commit:
        return BuildInfo(version, commit, "pip_vcs")
    checkout = _editable_checkout(direct_url)
    if checkout is not None:
        commit = _git_commit(checkout)
        if commit is not None:
            return BuildInfo(version, commit, "git")
    return BuildInfo(version, UNKNOWN, UNKNOWN)


def _direct_url() -> dict[str, object]:
    """pip's ``direct_url.json`` of the installed distribution (PEP 610), or ``{}``.

    Every distribution of the name is asked, the first that has one wins: run from a checkout,
    the working directory's ``opledger.egg-info`` (setuptools' build leftover, without pip's
    record) comes before the installed metadata on ``sys.path``."""
    for distribution in metadata.distributions(name=DISTRIBUTION):
        try:
            text = distribution.read_text("direct_url.json")
            found = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def _editable_checkout(direct_url: dict[str, object]) -> Path | None:
    """The directory of an editable install, when this code is the code in it; else None.

    Checked, not assumed: a non-editable install's source directory may have moved on since, and
    a ``site-packages`` inside some other repository must not report that repository's commit."""
    dir_info = direct_url.get("dir_info")
    url = direct_url.get("url")
    if not isinstance(dir_info, dict) or not dir_info.get("editable") or not isinstance(url, str):
        return None
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    root = Path(unquote(parsed.path)).resolve()
    here = Path(__file__).resolve()
    return root if here.is_relative_to(root) else None


def _git(root: Path, *args: str) -> str | None:
    # safe.directory: git refuses a repository another user owns (a CI checkout made by another
    # account) unless told; these calls only read HEAD and the status of tracked files, and run
    # no fsmonitor hook the repository's config may name.
    command = ["git", "-c", f"safe.directory={root}", "-c", "core.fsmonitor=false", "-C", str(root), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return None  # no git on this host, or it hung
    return done.stdout.strip() if done.returncode == 0 else None


def _git_commit(root: Path) -> str | None:
    """``HEAD`` of the checkout at ``root`` (``-dirty`` when tracked files differ), or None when
    ``root`` is not the top of a git work tree."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changed else head


@cache
def module_digest(module_name: str) -> str:
    """``sha256:<hex>`` of a module's source bytes, or ``""`` when it has no source to read (a
    built-in, an extension, code typed into a REPL). Computed once per module and process.

    Args:
        module_name: an imported module's ``__name__``, e.g. ``type(app).__module__``.
    """
    module = sys.modules.get(module_name)
    if module is None:
        return ""
    source: bytes | None = None
    path = getattr(module, "__file__", None)
    if path and str(path).endswith(".py"):
        try:
            source = Path(path).read_bytes()
        except OSError:
            source = None
    if source is None:
        try:
            source = inspect.getsource(module).encode()
        except (OSError, TypeError):
            return ""
    return "sha256:" + hashlib.sha256(source).hexdigest()
