"""PostgreSQL connection options from the database URL (issue 34 item 1): parsing, refusals,
and every rendering (libpq conninfo, the library's environment and pool, yoyo's URL)."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from ledger.config import CONNECTION_OPTIONS_ENV, Database, Settings
from ledger.connection_options import LIBPQ_PARAMETERS, one_line
from ledger.errors import ConfigurationError
from ledger.redaction import mask_url
from migrations.drivers.recorders import LedgerPostgresFactory

BASE = "postgresql://app:pa%20ss%40word@db.example:6432/shop"
PASSWORD = "pa ss@word"


def test_libpq_parameters_are_kept_sorted_and_reach_every_rendering() -> None:
    url = (f"{BASE}?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=/etc/ssl/db%20ca.pem"
           "&application_name=shop&connect_timeout=7&schema=s&pool_size=3")
    database = Database.parse(url)
    assert database.options == (("application_name", "shop"), ("connect_timeout", "7"),
                                ("sslmode", "verify-full"), ("sslrootcert", "/etc/ssl/db ca.pem"),
                                ("target_session_attrs", "read-write"))
    assert database.password == PASSWORD
    assert Database.parse(database.url()) == database  # the password and the options round-trip
    info = conninfo_to_dict(database.conninfo())
    assert info == {"host": "db.example", "port": "6432", "dbname": "shop", "user": "app", "password": PASSWORD,
                    "application_name": "shop", "connect_timeout": "7", "sslmode": "verify-full",
                    "sslrootcert": "/etc/ssl/db ca.pem", "target_session_attrs": "read-write"}
    yoyo = Database.parse(database.url(driver="psycopg").replace("postgresql+psycopg", "postgresql"))
    assert yoyo.options == database.options and yoyo.schema == "s"  # yoyo passes its query to psycopg
    assert "pool_size" not in database.url(driver="psycopg")
    env = database.library_env(create_table=False)
    assert env["PERSISTENCE_MODULE"] == "migrations.drivers.recorders:LedgerPostgresFactory"
    assert json.loads(env[CONNECTION_OPTIONS_ENV]) == dict(database.options)


def test_the_librarys_pool_connects_with_the_options() -> None:
    database = Database.parse(f"{BASE}?sslmode=require&application_name=shop")
    factory = LedgerPostgresFactory(database.library_env(create_table=False))  # the pool is not opened
    try:
        kwargs = factory.datastore.pool.kwargs
        assert kwargs is not None
        assert (kwargs["sslmode"], kwargs["application_name"], kwargs["host"]) == ("require", "shop", "db.example")
    finally:
        factory.close()


def test_a_url_without_options_renders_as_before() -> None:
    database = Database.parse("postgresql://root@127.0.0.1:5432/test?schema=s")
    assert database.options == ()
    assert CONNECTION_OPTIONS_ENV not in database.library_env(create_table=False)
    assert conninfo_to_dict(database.conninfo()) == {"host": "127.0.0.1", "port": "5432", "dbname": "test",
                                                      "user": "root"}


def test_a_connect_timeout_in_the_url_wins_over_the_callers_default() -> None:
    assert conninfo_to_dict(Database.parse(BASE).conninfo(connect_timeout=10))["connect_timeout"] == "10"
    with_own = Database.parse(f"{BASE}?connect_timeout=3")
    assert conninfo_to_dict(with_own.conninfo(connect_timeout=10))["connect_timeout"] == "3"


@pytest.mark.parametrize(("query", "message"), [
    ("sslmod=require", r"unknown PostgreSQL URL parameter\(s\) \['sslmod'\]"),
    ("replication=database&shema=x", r"\['replication', 'shema'\]"),
    ("password=other", r"\['password'\]"),
    ("sslmode=required", "sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full"),
    ("target_session_attrs=primary-only", "target_session_attrs must be one of"),
    ("connect_timeout=5s", "connect_timeout must be a whole number"),
    ("sslmode=require&sslmode=disable", "'sslmode' is given 2 times"),
])
def test_bad_parameters_are_refused_in_one_line_without_the_password(query: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        Database.parse(f"{BASE}?{query}&sslpassword=key-pass")
    text = str(caught.value)
    assert "\n" not in text and PASSWORD not in text and "pa%20ss%40word" not in text and "key-pass" not in text
    assert "app:***@db.example" in text


def test_an_sqlite_url_takes_no_query() -> None:
    with pytest.raises(ConfigurationError, match="an SQLite URL takes no query parameters"):
        Database.parse("sqlite:///store.db?sslmode=require")
    with pytest.raises(ValueError, match="no query parameters"):  # as a setting too
        Settings(database_url="sqlite:///store.db?mode=ro")


def test_every_allowed_parameter_is_one_this_libpq_knows() -> None:
    known = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    assert LIBPQ_PARAMETERS <= known, sorted(LIBPQ_PARAMETERS - known)


def test_a_failed_connection_is_one_line_with_the_secrets_masked() -> None:
    database = Database.parse(f"{BASE}?sslmode=verify-full&sslpassword=key-pass")
    exc = psycopg.OperationalError(
        f'connection to server at "db.example", port 6432 failed: root certificate file "/r/.postgresql/root.crt" '
        f'does not exist\nEither provide the file, use the system\'s trusted roots with sslrootcert=system, or '
        f'change sslmode to disable server certificate verification.\n  (password {PASSWORD}, key-pass)')
    text = str(database.unreachable(exc))
    assert text.startswith("cannot reach PostgreSQL at db.example:6432 (sslmode=verify-full): connection to server")
    assert "\n" not in text and PASSWORD not in text and "key-pass" not in text
    assert "does not exist; Either provide the file" in text


def test_one_line_joins_and_hides() -> None:
    assert one_line("a\n   b\n\n c", hide=("b", "")) == "a; ***; c"


def test_mask_url_masks_libpq_secret_parameters() -> None:
    masked = mask_url(f"{BASE}?sslmode=require&sslpassword=key-pass&application_name=x")
    assert masked == "postgresql://app:***@db.example:6432/shop?sslmode=require&sslpassword=***&application_name=x"


def test_the_password_is_not_in_the_repr() -> None:
    assert PASSWORD not in repr(Database.parse(BASE))
