"""Call budget rules (issue 14 item 1): scopes, epoch-aligned windows and the guard before a
window's end. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executors.budgets import budget_of, send_margin
from ledger.budgets import (
    GLOBAL_SCOPE,
    BudgetLevel,
    CallWindow,
    Level,
    LevelWindow,
    budget_levels,
    budget_scope,
    limiting_level,
    scope_labels,
    scope_level,
    window_bounds,
    window_id,
)
from ledger.declarations import CallBudget, DeclarationError, Integration


def _declaration(**budgets: object) -> Integration:
    return Integration.parse({"name": "payments.refund", "version": 1, "adapter": "webhook",
                              "delivery_mode": "idempotent", **({"budgets": budgets} if budgets else {})})


def test_scopes_per_integration_and_per_tenant() -> None:
    assert budget_scope(_declaration(), "acme") is None
    assert budget_scope(_declaration(calls_per_window=5), "acme") == "payments.refund"
    assert budget_scope(_declaration(calls_per_window=5, scope="tenant"), "acme") == "payments.refund|tenant=acme"


@pytest.mark.parametrize(("at", "start"), [
    (datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 1, 999999, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)),
])
def test_windows_are_aligned_to_the_epoch(at: datetime, start: datetime) -> None:
    assert window_bounds(at, 2.0) == (start, start + timedelta(seconds=2))
    assert window_id("s", start) == window_id("s", window_bounds(at, 2.0)[0]) != window_id("t", start)


def test_a_call_leaves_a_margin_before_its_window_ends_and_none_starts_in_the_guard_before() -> None:
    # Send margin: the smaller of 0.25 s and a quarter of the window (tryout B5: calls checked
    # just before a 2 s window ended reached the provider ~100 ms after it). Guard: a tenth of
    # the window, at most 1 s, before that.
    now = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    budget = budget_of(_declaration(calls_per_window=10, window_seconds=2.0), "acme", now)
    assert budget is not None
    (slot,) = budget.slots
    assert slot.send_by == slot.end - timedelta(seconds=0.25) == budget.send_by
    assert slot.closes_at == slot.send_by - timedelta(seconds=0.2)
    long = budget_of(_declaration(calls_per_window=10, window_seconds=3600.0), "acme", now)
    assert long is not None and long.slots[0].end - long.slots[0].send_by == timedelta(seconds=0.25)
    assert long.slots[0].send_by - long.slots[0].closes_at == timedelta(seconds=1)  # at most 1 s
    assert send_margin(1.0) == 0.25 and send_margin(0.4) == 0.1 and send_margin(60.0) == 0.25


def test_a_window_gives_out_its_limit_and_no_more() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    window = CallWindow.open(scope="s", start=start, end=start + timedelta(seconds=2), limit=2)
    window.take(window_id("a", start))
    window.take(window_id("b", start), "lookup")
    assert window.left == 0
    with pytest.raises(ValueError, match="is full"):
        window.take(window_id("c", start))


# ----------------------------------------------------------------- hierarchical budgets

GLOBAL = CallBudget(calls_per_window=100, window_seconds=60.0)


def test_levels_outermost_first_global_integration_tenant() -> None:
    nested = _declaration(calls_per_window=10, window_seconds=2.0,
                          per_tenant={"calls_per_window": 3, "window_seconds": 1.0})
    assert budget_levels(nested, "acme", GLOBAL) == (
        BudgetLevel(Level.GLOBAL, GLOBAL_SCOPE, 100, 60.0),
        BudgetLevel(Level.INTEGRATION, "payments.refund", 10, 2.0),
        BudgetLevel(Level.TENANT, "payments.refund|tenant=acme", 3, 1.0),
    )
    assert budget_levels(nested, "acme") == budget_levels(nested, "acme", GLOBAL)[1:]
    assert budget_levels(_declaration(), "acme", GLOBAL) == (BudgetLevel(Level.GLOBAL, GLOBAL_SCOPE, 100, 60.0),)
    assert budget_levels(_declaration(), "acme") == ()
    per_tenant_only = _declaration(calls_per_window=5, scope="tenant")
    assert budget_levels(per_tenant_only, "acme") == (
        BudgetLevel(Level.TENANT, "payments.refund|tenant=acme", 5, 60.0),)


@pytest.mark.parametrize(("scope", "level", "labels"), [
    (GLOBAL_SCOPE, Level.GLOBAL, ("", "")),
    ("payments.refund", Level.INTEGRATION, ("payments.refund", "")),
    ("payments.refund|tenant=acme", Level.TENANT, ("payments.refund", "acme")),
])
def test_a_scope_key_names_its_level(scope: str, level: Level, labels: tuple[str, str]) -> None:
    assert scope_level(scope) is level and scope_labels(scope) == labels


@pytest.mark.parametrize("budgets", [
    {"per_tenant": {"calls_per_window": 3}},  # no integration budget to sit inside
    {"calls_per_window": 10, "scope": "tenant", "per_tenant": {"calls_per_window": 3}},
    {"calls_per_window": 10, "per_tenant": {"calls_per_window": 0}},
    {"calls_per_window": 10, "per_tenant": {"window_seconds": 1.0}},
])
def test_a_per_tenant_budget_sits_inside_an_integration_budget(budgets: dict[str, object]) -> None:
    with pytest.raises(DeclarationError, match="per_tenant"):
        _declaration(**budgets)


def test_a_declaration_without_per_tenant_keeps_its_digest() -> None:
    # Recorded digests predate per_tenant: at its default it is left out (no false drift). The
    # value is the digest the code before per_tenant computed for this declaration.
    assert _declaration(calls_per_window=5).digest() == (
        "sha256:a32688ed489fafe7d506b67803bc044fa8e0379802fe5df511735026707e3aff")
    nested = _declaration(calls_per_window=5, per_tenant={"calls_per_window": 2})
    assert nested.digest() != _declaration(calls_per_window=5).digest()


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(level: Level, left: int, end_seconds: float, closes_seconds: float | None = None) -> LevelWindow:
    closes = end_seconds - 0.1 if closes_seconds is None else closes_seconds
    return LevelWindow(BudgetLevel(level, level.value, 10, end_seconds), T0, T0 + timedelta(seconds=end_seconds),
                       T0 + timedelta(seconds=closes), left)


G, INT, T = Level.GLOBAL, Level.INTEGRATION, Level.TENANT


@pytest.mark.parametrize(("windows", "now", "limits"), [
    # every level has a call left: none limits
    ([(G, 5, 60), (INT, 1, 2), (T, 1, 1)], 0.5, None),
    # one level used up: that one, whichever it is
    ([(G, 0, 60), (INT, 1, 2), (T, 1, 1)], 0.5, G),
    ([(G, 5, 60), (INT, 0, 2), (T, 1, 1)], 0.5, INT),
    ([(G, 5, 60), (INT, 1, 2), (T, 0, 1)], 0.5, T),
    # several used up: the one whose window ends last (waiting less would find it still full)
    ([(G, 0, 60), (INT, 0, 2), (T, 0, 1)], 0.5, G),
    ([(G, 5, 60), (INT, 0, 2), (T, 0, 1)], 0.5, INT),
    # inside a level's guard before its end: that level, though it has calls left
    ([(G, 5, 60), (INT, 5, 2), (T, 5, 1)], 0.95, T),
    ([(G, 5, 60), (INT, 5, 2), (T, 0, 4)], 1.95, T),
    # same end: the outermost
    ([(G, 0, 2), (INT, 0, 2)], 0.5, G),
    # no levels: nothing limits
    ([], 0.5, None),
])
def test_which_level_limits(windows: list[tuple[Level, int, float]], now: float, limits: Level | None) -> None:
    seen = [_at(level, left, end) for level, left, end in windows]
    found = limiting_level(seen, T0 + timedelta(seconds=now))
    assert (found.level.level if found else None) is limits


def test_a_call_counts_until_the_first_of_its_windows_ends() -> None:
    nested = _declaration(calls_per_window=10, window_seconds=2.0,
                          per_tenant={"calls_per_window": 3, "window_seconds": 1.0})
    budget = budget_of(nested, "acme", T0 + timedelta(seconds=0.5), GLOBAL)
    assert budget is not None
    assert [s.level.level for s in budget.slots] == [G, INT, T]
    assert budget.send_by == T0 + timedelta(seconds=1 - 0.25)  # the tenant's window, less its margin


_levels = st.lists(st.tuples(st.sampled_from(list(Level)), st.integers(0, 3), st.floats(0.5, 120),
                             st.floats(0.0, 0.2)), max_size=3)


@given(levels=_levels, now=st.floats(0, 130))
def test_the_limiting_level_is_one_that_stops_the_call_and_ends_last(
        levels: list[tuple[Level, int, float, float]], now: float) -> None:
    seen = [LevelWindow(BudgetLevel(level, f"{level.value}{n}", 10, end), T0, T0 + timedelta(seconds=end),
                        T0 + timedelta(seconds=end - guard), left)
            for n, (level, left, end, guard) in enumerate(levels)]
    at = T0 + timedelta(seconds=now)
    stops = [w for w in seen if w.left <= 0 or at >= w.closes_at]
    found = limiting_level(seen, at)
    if not stops:
        assert found is None
    else:
        assert found in stops and all(found.end >= w.end for w in stops)
        assert found is next(w for w in stops if w.end == found.end)  # a tie: the outermost


@pytest.mark.parametrize("declared", [{"calls_per_window": 0}, {"window_seconds": 2}, {"calls": 5}, 5,
                                      {"calls_per_window": 5}, "100/min",
                                      {"calls_per_window": 10**20, "window_seconds": 0.001}])
def test_a_global_budget_that_is_not_one_is_refused_when_the_application_is_built(declared: object) -> None:
    from ledger.application import LedgerApplication
    from ledger.errors import ConfigurationError

    class App(LedgerApplication):
        global_call_budget = declared  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match="global_call_budget"):
        App(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})


def test_a_global_budget_is_read_from_the_application_class() -> None:
    from ledger.application import LedgerApplication

    class App(LedgerApplication):
        global_call_budget = {"calls_per_window": 100, "window_seconds": 60}

    app = App(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    assert app.global_budget == GLOBAL
    assert LedgerApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).global_budget is None


# ----------------------------------------------------------------- malformed budgets (tryout B6, B7, B8)

def _app_with(declared: object) -> None:
    from ledger.application import LedgerApplication

    class App(LedgerApplication):
        global_call_budget = declared  # type: ignore[assignment]

    App(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})


@pytest.mark.parametrize(("budgets", "path"), [
    ({"calls_per_window": 10, "window_seconds": 0.001}, "budgets.window_seconds"),
    ({"calls_per_window": 10, "window_seconds": 0.999}, "budgets.window_seconds"),
    ({"calls_per_window": 10, "window_seconds": 2, "per_tenant": {"calls_per_window": 1, "window_seconds": 0.5}},
     "budgets.per_tenant.window_seconds"),
])
def test_a_window_shorter_than_the_minimum_is_refused(budgets: dict[str, object], path: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        _declaration(**budgets)
    assert refused.value.problems == [(path, refused.value.problems[0][1])]
    assert refused.value.problems[0][1].startswith("window_seconds must be >= 1 s")


def test_the_minimum_window_is_allowed() -> None:
    assert budget_levels(_declaration(calls_per_window=1, window_seconds=1), "acme")[0].window_seconds == 1


@pytest.mark.parametrize("budgets", [{}, {"window_seconds": 10}, {"scope": "tenant"}, {"window_seconds": 60},
                                     {"calls_per_window": None, "window_seconds": 10}])
def test_a_budgets_block_that_limits_nothing_is_refused(budgets: dict[str, object]) -> None:
    with pytest.raises(DeclarationError) as refused:
        Integration.parse({"name": "payments.refund", "version": 1, "adapter": "webhook",
                           "delivery_mode": "idempotent", "budgets": budgets})
    assert refused.value.problems == [("budgets", "a budgets block must declare calls_per_window (calls per "
                                       "window, >= 1); leave budgets out for no call budget")]


def test_the_dumped_form_of_no_budget_parses_back_with_the_same_digest() -> None:
    plain = _declaration()
    dumped = plain.model_dump(mode="json")
    assert dumped["budgets"]["calls_per_window"] is None
    assert Integration.parse(dumped).digest() == plain.digest()


def test_an_integration_budget_without_a_window_has_the_documented_default() -> None:
    from ledger.declarations import DEFAULT_BUDGET_WINDOW_SECONDS

    assert DEFAULT_BUDGET_WINDOW_SECONDS == 60.0
    assert budget_levels(_declaration(calls_per_window=5), "acme")[0].window_seconds == 60.0


def test_a_per_tenant_budget_that_could_never_limit_is_refused() -> None:
    with pytest.raises(DeclarationError, match="more than the integration's 2 per 10 s: it would never limit"):
        _declaration(calls_per_window=2, window_seconds=10, per_tenant={"calls_per_window": 30, "window_seconds": 10})
    with pytest.raises(DeclarationError, match="never limit"):
        _declaration(calls_per_window=2, window_seconds=10, per_tenant={"calls_per_window": 3, "window_seconds": 5})
    # a longer tenant window can limit with more calls: 30 an hour inside 2 a second
    longer = _declaration(calls_per_window=2, window_seconds=1, per_tenant={"calls_per_window": 30,
                                                                            "window_seconds": 3600})
    assert [level.limit for level in budget_levels(longer, "acme")] == [2, 30]


@pytest.mark.parametrize(("declared", "says"), [
    ({"calls_per_window": 0}, "global_call_budget is invalid: calls_per_window: Input should be greater than or "
                              "equal to 1"),
    ({"calls_per_window": 5}, "global_call_budget is invalid: window_seconds: required (seconds): the global budget names "
                              "its window"),
    ("100/min", "global_call_budget must be a mapping {calls_per_window: N >= 1, window_seconds: S}, got str "
                "'100/min'"),
    ({"calls_per_window": 10**20, "window_seconds": 0.001},
     "global_call_budget is invalid: window_seconds: window_seconds must be >= 1 s"),
])
def test_a_global_budget_error_is_one_clear_line(declared: object, says: str) -> None:
    from ledger.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as refused:
        _app_with(declared)
    text = str(refused.value)
    assert text.startswith(says)
    assert "\n" not in text and "pydantic.dev" not in text and "Value error" not in text


def test_declaration_errors_carry_no_pydantic_prefix() -> None:
    with pytest.raises(DeclarationError) as refused:
        _declaration(calls_per_window=5, scope="tenant", per_tenant={"calls_per_window": 1, "window_seconds": 5})
    assert "Value error" not in str(refused.value)
    assert refused.value.problems == [("budgets.per_tenant", "scope: tenant already makes calls_per_window each "
                                       "tenant's; per_tenant needs scope: integration")]
