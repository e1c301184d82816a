"""Grants in wall-clock time and operator grants that only narrow (issue 36 item 6), on the
pure parts: the gate judges ``expires_at`` against the ``now`` it is given (the database's, read
by the policy stage), never a clock of its own; ``runner.grant_bounds`` says when a grant is
wider than another."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.gate import NOW, gate, grant, proposal
from warrant.runner import policy, scopes
from warrant.runner.cli.runs import parse_duration, parse_instant
from warrant.runner.client.grant_admission import capability_kinds
from warrant.runner.errors import InvalidRequest
from warrant.runner.grant_bounds import Bounds, scope_within, widening, wider_on
from warrant.runner.permission_wait import ASKING_CODES
from warrant.runner.scopes import ResourceKind
from warrant.runner.spec import Grant
from warrant.tools._plugins import registry_for

PATH, URL, EMAIL, IDENT = (ResourceKind(k) for k in ("path", "url", "email", "identifier"))


def _decide(expires_at: float | None, *, now: float = NOW) -> policy.Decision:
    inp = gate(proposal(), grants=[grant("search:public", "public", expires_at=expires_at)])
    return policy.evaluate(dataclasses.replace(inp, now=now))


# --- the gate: expires_at against the given now -----------------------------------------------


def test_a_grant_is_live_until_its_expires_at_and_expired_from_it():
    assert isinstance(_decide(None), policy.Accept)
    assert isinstance(_decide(NOW + 0.001), policy.Accept)
    for expires_at in (NOW, NOW - 1):
        decision = _decide(expires_at)
        assert isinstance(decision, policy.Reject)
        assert decision.code == "GRANT_EXPIRED"


def test_an_expired_grant_is_not_a_refusal_a_grant_wait_cures():
    assert "GRANT_EXPIRED" not in ASKING_CODES


def test_the_gate_reads_no_clock_only_the_now_it_is_given(monkeypatch):
    """A host clock a day ahead or behind changes nothing: only ``GateInput.now`` (the
    database's time, read by the policy stage) decides."""
    for skew in (-86_400.0, 86_400.0):
        monkeypatch.setattr(time, "time", lambda skew=skew: NOW + skew)
        monkeypatch.setattr(time, "monotonic", lambda skew=skew: NOW + skew)
        assert isinstance(_decide(NOW + 10), policy.Accept)
        assert _decide(NOW + 10, now=NOW + 10).code == "GRANT_EXPIRED"  # type: ignore[union-attr]


def test_a_spec_grant_expiry_needs_a_utc_offset():
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert Grant(capability="c", expires_at=at).expires_at == at
    assert Grant.model_validate({"capability": "c", "expires_at": "2030-01-01T00:00:00Z"})
    with pytest.raises(ValidationError):
        Grant.model_validate({"capability": "c", "expires_at": "2030-01-01T00:00:00"})


# --- wider, bound by bound --------------------------------------------------------------------


def test_each_bound_that_allows_more_is_named():
    standing = Bounds(
        resource_scope="/data/out",
        expires_at=NOW + 60,
        expires_at_step=5,
        uses_left=2,
        destinations_from=frozenset({"goal", "answers"}),
    )
    narrower = Bounds(
        resource_scope="/data/out/reports",
        expires_at=NOW + 30,
        expires_at_step=4,
        uses_left=1,
        destinations_from=frozenset({"goal"}),
    )
    assert wider_on(narrower, standing, kinds={PATH}) == ()
    assert wider_on(standing, standing, kinds={PATH}) == ()
    assert wider_on(Bounds(), standing, kinds={PATH}) == (
        "resource_scope",
        "expires_at",
        "expires_at_step",
        "max_uses",
        "destinations_from",
    )
    for bound, value, name in (
        ("resource_scope", "/data", "resource_scope"),
        ("resource_scope", "/data/outside", "resource_scope"),
        ("expires_at", NOW + 61, "expires_at"),
        ("expires_at", None, "expires_at"),
        ("expires_at_step", 6, "expires_at_step"),
        ("uses_left", 3, "max_uses"),
        ("uses_left", None, "max_uses"),
        ("destinations_from", frozenset({"goal", "spec"}), "destinations_from"),
        ("destinations_from", None, "destinations_from"),
    ):
        changed = dataclasses.replace(narrower, **{bound: value})
        assert wider_on(changed, standing, kinds={PATH}) == (name,), (bound, value)


def test_uses_compare_with_what_the_standing_grant_has_left():
    spent = Bounds(uses_left=0)
    assert wider_on(Bounds(uses_left=1), spent, kinds={None}) == ("max_uses",)
    assert wider_on(Bounds(uses_left=0), spent, kinds={None}) == ()


def test_no_standing_grant_is_a_new_capability_and_any_one_that_holds_it_narrows():
    added = Bounds(resource_scope="reports/*")
    assert widening(added, [], kinds={None}) is None
    found = widening(added, [Bounds(resource_scope="docs/*")], kinds={None})
    assert found is not None and found.wider_on == ("resource_scope",)
    assert widening(added, [Bounds(resource_scope="docs/*"), Bounds()], kinds={None}) is None
    closest = Bounds(resource_scope="*", expires_at=NOW)
    other = Bounds(resource_scope="docs/*", expires_at=NOW)
    found = widening(added, [other, closest], kinds={None})
    assert found is not None and found.closest == closest and found.wider_on == ("expires_at",)


@pytest.mark.parametrize(
    ("kind", "inner", "outer", "within"),
    [
        (PATH, "/data/out/a", "/data/out", True),
        (PATH, "/data/outside", "/data/out", False),
        (PATH, "/data", "/data/out", False),
        (URL, "https://a.example.com/api/v1", "https://a.example.com/api", True),
        (URL, "https://a.example.com/apix", "https://a.example.com/api", False),
        (URL, "https://a.example.com:8443/api", "https://a.example.com/api", False),
        (URL, "http://a.example.com/api", "https://a.example.com/api", False),
        (URL, "https://x.a.example.com/", "https://*.example.com/", True),
        (URL, "https://*.a.example.com/", "https://*.example.com/", True),
        (URL, "https://example.com/", "https://*.example.com/", False),
        (URL, "https://*.example.com/", "https://a.example.com/", False),
        (EMAIL, "bob@example.com", "@example.com", True),
        (EMAIL, "@example.com", "bob@example.com", False),
        (EMAIL, "bob@sub.example.com", "@example.com", False),
        (IDENT, "acct-42", "acct-*", True),
        (IDENT, "acct-4*", "acct-*", True),
        (IDENT, "acct-*", "acct-4*", False),
        (IDENT, "acct-[0-9]", "acct-?", False),  # a glob inside a glob: unsure, so wider
        (None, "reports/a.md", "reports/*", True),
        (None, "reports/x*", "reports/*", True),
        (None, "reports/*", "reports/a.md", False),
        (PATH, "*", "/data", False),
        (PATH, "/data", "not a path", False),
    ],
)
def test_scope_within_by_kind(kind, inner, outer, within):
    assert scope_within(inner, outer, kinds={kind}) is within
    assert scope_within(inner, "*", kinds={kind})


def test_a_scope_is_within_only_if_every_reading_of_the_capability_agrees():
    # a path tool reads /data/out as everything below it; an untyped one as that exact string
    assert scope_within("/data/out/a", "/data/out", kinds={PATH})
    assert not scope_within("/data/out/a", "/data/out", kinds={PATH, None})
    assert not scope_within("/data/out/a", "/data/out", kinds=())  # no tool known: every reading


def test_capability_kinds_come_from_the_tools_that_need_it():
    registry = registry_for()
    assert capability_kinds(registry, "artifact:write") == {None}
    assert capability_kinds(registry, "no:such-capability") == frozenset()


# --- a property: within means every value the narrower scope covers, the wider covers --------

_SEGMENTS = st.sampled_from(["a", "b", "ab", "out", "x-1"])
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
_HOSTS = st.sampled_from(["example.com", "a.example.com", "b.a.example.com", "other.org"])
_URL_SCOPES = st.builds(
    lambda wild, host, port, path: f"https://{'*.' if wild else ''}{host}{port}{path}",
    st.booleans(),
    _HOSTS,
    st.sampled_from(["", ":8443"]),
    st.sampled_from(["/", "/api", "/api/v1", "/apix"]),
)
_URLS = st.builds(
    lambda host, port, path: f"https://{host}{port}{path}",
    _HOSTS,
    st.sampled_from(["", ":8443"]),
    st.sampled_from(["/", "/api", "/api/v1", "/api/v1/x", "/apix"]),
)
_EMAIL_SCOPES = st.builds(
    lambda local, host: f"{local}@{host}", st.sampled_from(["", "bob", "eve"]), _HOSTS
)
_EMAILS = st.builds(lambda local, host: f"{local}@{host}", st.sampled_from(["bob", "eve"]), _HOSTS)
_IDS = st.text(alphabet="ab-1", min_size=1, max_size=5)
_ID_SCOPES = st.one_of(_IDS, _IDS.map(lambda s: s + "*"), _IDS.map(lambda s: s + "?"))
_CASES = {
    PATH: (_PATHS, _PATHS),
    URL: (_URL_SCOPES, _URLS),
    EMAIL: (_EMAIL_SCOPES, _EMAILS),
    IDENT: (_ID_SCOPES, _IDS),
}


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_within_never_lets_a_value_through_the_wider_scope_does_not_cover(data):
    kind = data.draw(st.sampled_from(sorted(_CASES)))
    scopes_of, values_of = _CASES[kind]
    inner, outer = data.draw(scopes_of), data.draw(scopes_of)
    if scope_within(inner, outer, kinds={kind}):
        for value in data.draw(st.lists(values_of, min_size=1, max_size=8)):
            if scopes.covers(kind, inner, value):
                assert scopes.covers(kind, outer, value), (kind, inner, outer, value)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_within_is_reflexive_and_transitive(data):
    kind = data.draw(st.sampled_from(sorted(_CASES)))
    scopes_of, _ = _CASES[kind]
    a, b, c = data.draw(scopes_of), data.draw(scopes_of), data.draw(scopes_of)
    assert scope_within(a, a, kinds={kind})
    if scope_within(a, b, kinds={kind}) and scope_within(b, c, kinds={kind}):
        assert scope_within(a, c, kinds={kind}), (kind, a, b, c)


# --- the CLI's time options -------------------------------------------------------------------


def test_durations_and_instants():
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d") == 172_800
    assert parse_duration("45") == 45
    for bad in ("", "1x", "h", "-5", "0s", "1h 30m"):
        with pytest.raises(InvalidRequest) as exc:
            parse_duration(bad)
        assert exc.value.code == "DURATION_INVALID", bad
    assert parse_instant("2030-01-01T00:00:00") == datetime(2030, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidRequest) as exc:
        parse_instant("tomorrow")
    assert exc.value.code == "INVALID_DATE"


def test_the_testing_harness_judges_a_grant_s_expires_at():
    from tests import paid_tool
    from warrant.testing import ToolHarness

    harness = ToolHarness(paid_tool.TOOL)
    for at, decision in (("2000-01-01T00:00:00Z", "refused"), ("2999-01-01T00:00:00Z", "accepted")):
        grants = [{"capability": paid_tool.CAPABILITY, "expires_at": at}]
        verdict = harness.propose({"query": "prices"}, grants=grants)
        assert verdict.decision == decision, at
        assert verdict.code == (None if decision == "accepted" else "GRANT_EXPIRED")
