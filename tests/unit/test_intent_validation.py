"""Bad intents and bad operator input get one clear, typed error (found by a fresh-user trial)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from ledger.config import Database
from ledger.declarations import Integration
from ledger.errors import ConfigurationError, InvalidArgumentError, PayloadError
from ledger.identity import Source
from ledger.operation import Operation
from tests.unit.builders import in_memory_app

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOOK = Integration.parse({"name": "hooks.send", "version": 1, "adapter": "webhook",
                          "delivery_mode": "idempotent", "payload": {"n": "public", "key": "secret"}})
SOURCE = Source(tenant="t", entity_type="m:E", entity_id=uuid4(), entity_version=1)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"target": "ftp://x/y"}, "target: 'ftp://x/y' is not an http"),
    ({"target": "not a url"}, "is not an http"),
    ({"target": None}, "target: none given"),
    ({"traceparent": "garbage"}, "traceparent: 'garbage' is not a W3C traceparent"),
    ({"principal": " "}, "principal: must not be empty"),
    ({"source": Source(tenant="", entity_type="m:E", entity_id=uuid4(), entity_version=1)}, "tenant"),
    ({"source": Source(tenant="t", entity_type="m:E", entity_id=uuid4(), entity_version=1, effect_index=-1)},
     "effect_index: must be >= 0"),
    ({"payload": {"key": "secretref:../../etc"}}, "payload.key: secret fields take"),
])
def test_bad_intents_are_refused_with_the_field_named(kwargs: dict, message: str) -> None:
    args = {"now": NOW, "integration": HOOK, "source": SOURCE, "payload": {"n": 1},
            "target": "https://partner.example/hook"} | kwargs
    with pytest.raises(PayloadError, match=message.replace("(", r"\(")):
        Operation.intend(**args)


def test_a_good_intent_with_a_traceparent_is_accepted() -> None:
    op = Operation.intend(now=NOW, integration=HOOK, source=SOURCE, payload={"key": "secretref:vault/k-1"},
                          target="https://partner.example/hook",
                          traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert op.traceparent.startswith("00-4bf9")


def test_intend_needs_the_authorizing_transition() -> None:
    app, thing = in_memory_app(HOOK)
    app.save(thing)
    with pytest.raises(InvalidArgumentError, match="authorizing transition"):
        app.intend(thing, "hooks.send", payload={"n": 1}, target="https://p.example/h")


def test_operator_input_is_checked() -> None:
    op = Operation.intend(now=NOW, integration=HOOK, source=SOURCE, payload={}, target="https://p.example/h")
    with pytest.raises(InvalidArgumentError, match="principal is required"):
        op.request_cancel(now=NOW, principal="", reason="x")
    with pytest.raises(InvalidArgumentError, match="unknown resolution 'bogus'"):
        op.resolve(now=NOW, principal="ops", resolution="bogus", evidence="checked")


def test_unknown_postgres_url_parameters_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown PostgreSQL URL parameter"):
        Database.parse("postgresql://root@127.0.0.1/test?shema=demo")


@pytest.mark.parametrize("schema", ["ReviewUpper", "1review", "a;drop", "x" * 64, "with-dash"])
def test_schema_names_that_would_not_read_the_same_quoted_and_unquoted_are_refused(schema: str) -> None:
    with pytest.raises(ConfigurationError, match="schema must be lower-case"):
        Database.parse(f"postgresql://root@127.0.0.1/test?schema={schema}")
    assert Database.parse("postgresql://root@127.0.0.1/test?schema=_shop_2").schema == "_shop_2"


@pytest.mark.parametrize("value", ["0", "101", "-1", "two", ""])
def test_pool_sizes_out_of_range_are_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="pool_size must be a whole number from 1 to 100"):
        Database.parse(f"postgresql://root@127.0.0.1/test?pool_size={value}")


def test_a_pool_size_reaches_both_pools_and_round_trips() -> None:
    database = Database.parse("postgresql://root@127.0.0.1/test?schema=s&pool_size=3")
    env = database.library_env(create_table=False)
    assert (database.pool_size, env["POSTGRES_POOL_SIZE"], env["POSTGRES_MAX_OVERFLOW"]) == (3, "1", "5")
    assert Database.parse(database.url()) == database
    assert "pool_size" not in database.url(driver="psycopg")  # not a driver parameter
