"""The ``eventsourcing`` library's own application test cases, run with the ledger mapper.

``MAPPER_TOPIC`` is set in ``os.environ`` because the library's cases build their applications
without passing it; ``Application.construct_env`` merges ``os.environ``. Two mappers run:

* ``LedgerMapper`` itself: the library's events (``Aggregate.Event``, ``BankAccount``'s events
  with their custom ``EmailAddress`` transcoding, snapshots) are host events, so this checks the
  host keeps its codec, with POPO and with SQLite files.
* ``EveryEventLedgerMapper``: opts *every* event class in, so ``ApplicationTestCase`` (plain
  aggregate events, caching, fast-forwarding under contention) runs through the msgspec path.
  ``ExampleApplicationTestCase`` cannot: its ``EmailAddress`` needs the transcoder it registers,
  and its snapshots hold ``Decimal`` in a ``dict[str, Any]``, which plain JSON cannot keep
  exactly, so the ledger codec refuses them by design.

The library modules are imported, not their classes, so pytest does not collect the abstract bases.
Source: DESIGN §11 (running the library's test cases); eventsourcing 9.5 ``tests.application``.
"""

from __future__ import annotations

import os
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from unittest import mock
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.tests import application as lib_app

from ledger.codec import LedgerMapper


class EveryEventLedgerMapper(LedgerMapper[UUID]):
    """Stores every event with the ledger codec (conformance only)."""

    def handles(self, cls: type) -> bool:
        return True


LEDGER_MAPPER = "ledger.codec:LedgerMapper"
EVERY_EVENT_MAPPER = f"{__name__}:EveryEventLedgerMapper"


class _WithEnv:
    """Sets the environment for one test and restores it afterwards."""

    mapper_topic = LEDGER_MAPPER
    persistence: dict[str, str] = {}

    def setUp(self) -> None:
        env = {"MAPPER_TOPIC": self.mapper_topic, **self.persistence}
        if env.get("PERSISTENCE_MODULE") == "eventsourcing.sqlite":
            self._tmp = TemporaryDirectory()
            env["SQLITE_DBNAME"] = str(Path(self._tmp.name) / "events.db")
        self._env_patch = mock.patch.dict(os.environ, env)
        self._env_patch.start()
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        super().tearDown()  # type: ignore[misc]
        self._env_patch.stop()
        if hasattr(self, "_tmp"):
            self._tmp.cleanup()

    def test_mapper_in_use(self: Any) -> None:
        app = Application[UUID]()
        self.assertEqual(f"{type(app.mapper).__module__}:{type(app.mapper).__qualname__}", self.mapper_topic)
        app.close()


SQLITE = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "CREATE_TABLE": "y"}


class TestApplicationPOPO(_WithEnv, lib_app.ApplicationTestCase):
    pass


class TestApplicationSQLite(_WithEnv, lib_app.ApplicationTestCase):
    persistence = SQLITE


class TestExampleApplicationPOPO(_WithEnv, lib_app.ExampleApplicationTestCase):
    expected_factory_topic = "eventsourcing.popo:POPOFactory"


class TestExampleApplicationSQLite(_WithEnv, lib_app.ExampleApplicationTestCase):
    expected_factory_topic = "eventsourcing.sqlite:SQLiteFactory"
    persistence = SQLITE


class TestApplicationEveryEventLedgerPOPO(_WithEnv, lib_app.ApplicationTestCase):
    mapper_topic = EVERY_EVENT_MAPPER


class TestApplicationEveryEventLedgerSQLite(_WithEnv, lib_app.ApplicationTestCase):
    mapper_topic = EVERY_EVENT_MAPPER
    persistence = SQLITE
