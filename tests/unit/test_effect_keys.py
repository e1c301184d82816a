"""Business effect keys (``Tool.effect_key``): the gate's effects layer as a pure function, the
contract's check at registration, and a parallel step's calls with one key."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import Field

from tests.gate import NOW, confirmation, gate, grant, noop_tool, proposal
from warrant.runner import fan_in, policy
from warrant.runner.canonical import proposal_hash
from warrant.runner.errors import PluginError
from warrant.runner.spec import ToolProposal
from warrant.runner.views import EffectView, PreApprovalView
from warrant.tools._contract import SideEffect, Tool, ToolInput
from warrant.tools._registry import Registry


class RefundIn(ToolInput):
    order_id: str = Field(pattern=r"^ord_[a-z0-9]+$")
    """The order."""
    amount_cents: int = Field(gt=0)
    """How much."""


REFUND = noop_tool("refund", SideEffect.IDEMPOTENT_WRITE, RefundIn, effect_key="refund:{order_id}")
#: A compensatable write (a person confirms it unless relaxed), compared across runs for an hour.
DAILY = noop_tool(
    "daily",
    SideEffect.COMPENSATABLE_WRITE,
    RefundIn,
    effect_key="refund:{order_id}",
    effect_window_s=3600,
)
PLAIN = noop_tool("plain", SideEffect.IDEMPOTENT_WRITE, RefundIn)
REGISTRY = Registry([REFUND, DAILY, PLAIN])
GRANTS = [grant(f"{t}:use", grant_id=n) for n, t in enumerate(("refund", "daily", "plain"), 1)]


def call(tool: str = "refund", order: str = "ord_1", **kw: Any) -> dict[str, Any]:
    return proposal(tool, {"order_id": order, "amount_cents": 150}, **kw)


def earlier(status: str, **kw: Any) -> EffectView:
    base: dict[str, Any] = dict(
        key="refund:ord_1", run_id="run-1", step=1, command_id="cmd-1", status=status
    )
    return EffectView(**{**base, **kw})


def decide(
    raw: Any, effects: list[EffectView], *, relaxed: frozenset[str] = frozenset()
) -> policy.Decision:
    inp = gate(raw, grants=GRANTS, step=2)
    inp = dataclasses.replace(inp, registry=REGISTRY, effects=effects, relaxed=relaxed)
    return policy.evaluate(inp)


@pytest.mark.parametrize(
    ("status", "resolved"),
    [
        ("succeeded", None),
        ("unknown", None),
        ("unknown", "applied"),
        ("unknown", "handoff"),
        ("issued", None),
        ("started", None),
        ("accepted", None),
    ],
)
def test_an_earlier_effect_refuses_the_same_key_with_its_outcome(status, resolved):
    done = earlier(status, resolved=resolved, step=1, observation_id="tool-1")
    d = decide(call(), [done])
    assert isinstance(d, policy.Reject), d
    assert (d.code, d.layer) == ("DUPLICATE_EFFECT", "effects")
    assert d.earlier is not None
    assert (d.earlier["run_id"], d.earlier["same_run"], d.earlier["step"]) == ("run-1", True, 1)
    assert (d.earlier["status"], d.earlier["command_id"]) == (status, "cmd-1")
    assert d.earlier["observation_id"] == "tool-1"
    assert d.message and status in d.message and "repeat_effect" in d.message
    assert "ord_1" not in d.message  # the trace keeps no argument value
    checked = next(e for e in d.events if e.name == "policy.effect.checked")
    assert checked.details["earlier"] == status and "ord_1" not in str(checked.details)


@pytest.mark.parametrize(
    ("status", "resolved"),
    [
        ("failed", None),
        ("rejected", None),
        ("discarded", None),
        ("unknown", "not_applied"),
        ("accepted", "failed"),
    ],
)
def test_a_failed_or_refused_earlier_call_does_not_block(status, resolved):
    d = decide(call(), [earlier(status, resolved=resolved)])
    assert isinstance(d, policy.Accept), d
    assert d.effect_key == "refund:ord_1" and d.repeat_of is None


def test_another_key_or_a_tool_without_one_is_not_compared():
    done = [earlier("succeeded")]
    assert isinstance(decide(call(order="ord_2"), done), policy.Accept)
    plain = decide(call("plain"), done)
    assert isinstance(plain, policy.Accept) and plain.effect_key is None
    names = [e.name for e in plain.events]
    assert "policy.effect.checked" not in names


def test_other_runs_count_only_within_the_tools_window():
    other = dict(run_id="run-0", age_s=120.0)
    # window 0 (the default): within the run only
    assert isinstance(decide(call(), [earlier("succeeded", **other)]), policy.Accept)
    # an hour's window: two minutes ago counts, with the other run named
    relaxed = frozenset({"daily"})
    d = decide(call("daily"), [earlier("succeeded", **other)], relaxed=relaxed)
    assert isinstance(d, policy.Reject) and d.code == "DUPLICATE_EFFECT", d
    assert d.earlier is not None and (d.earlier["run_id"], d.earlier["same_run"]) == (
        "run-0",
        False,
    )
    assert d.message and "run run-0" in d.message
    # past the window it does not
    old = earlier("succeeded", run_id="run-0", age_s=3601.0)
    assert isinstance(decide(call("daily"), [old], relaxed=relaxed), policy.Accept)


def _with(d_input: Any, **kw: Any) -> Any:
    return dataclasses.replace(d_input, **kw)


def test_a_repeat_waits_for_a_person_whom_nothing_else_stands_in_for():
    raw = call("daily", repeat_effect=True)
    phash = proposal_hash("daily", "1", {"order_id": "ord_1", "amount_cents": 150})
    pre = PreApprovalView(
        pre_approval_id=1, proposal_hash=phash, tool="daily", approved_by="ops", used=False
    )
    inp = gate(raw, grants=GRANTS, step=2)
    inp = _with(
        inp,
        registry=REGISTRY,
        effects=[earlier("succeeded", observation_id="tool-1")],
        relaxed=frozenset({"daily"}),
        pre_approvals=[pre],
    )
    # without an earlier effect, the relaxed tool runs unattended (repeat_effect asks nothing)
    alone = policy.evaluate(_with(inp, effects=[]))
    assert isinstance(alone, policy.Accept) and alone.repeat_of is None
    waiting = policy.evaluate(inp)
    assert isinstance(waiting, policy.AwaitConfirmation), waiting
    assert waiting.proposal_hash == phash and waiting.effect_key == "refund:ord_1"
    asked = waiting.request()
    assert asked["repeats"]["step"] == 1 and asked["repeats"]["status"] == "succeeded"
    checked = next(e for e in waiting.events if e.name == "policy.confirmation.checked")
    assert checked.details["why"] == "repeat_effect"
    # a person's confirmation of that exact call lets it run, once
    confirmed = _with(inp, confirmations=[confirmation(phash, tool="daily")])
    d = policy.evaluate(confirmed)
    assert isinstance(d, policy.Accept), d
    assert d.confirmation_id == "c-1" and d.pre_approval_id is None
    assert d.repeat_of is not None and d.repeat_of.command_id == "cmd-1"
    declined = _with(inp, confirmations=[confirmation(phash, tool="daily", approved=False)])
    refused = policy.evaluate(declined)
    assert isinstance(refused, policy.Reject) and refused.code == "CONFIRMATION_DECLINED"


def test_repeat_effect_false_changes_no_hash_nor_decision():
    plain, said = call(), call(repeat_effect=False)
    a, b = decide(plain, []), decide(said, [])
    assert isinstance(a, policy.Accept) and isinstance(b, policy.Accept)
    assert a.proposal_hash == b.proposal_hash
    assert ToolProposal.model_validate(plain).repeat_effect is False
    assert "repeat_effect" not in ToolProposal.model_validate(plain).model_dump(
        exclude_defaults=True
    )


def test_two_calls_of_one_parallel_step_with_one_key():
    calls = [
        call(proposal_id="a"),
        call(order="ord_2", proposal_id="b"),
        {**call(proposal_id="c"), "arguments": {"order_id": "ord_1", "amount_cents": 99}},
    ]
    base = _with(gate(None, grants=GRANTS, step=2), registry=REGISTRY)
    decided = fan_in.gate_calls(base, calls)
    first, second, third = (d for _, _, d in decided)
    assert isinstance(first, policy.Accept) and isinstance(second, policy.Accept)
    assert isinstance(third, policy.Reject) and third.code == "DUPLICATE_EFFECT"
    assert third.earlier is not None
    assert (third.earlier["branch"], third.earlier["status"]) == (1, "issued")


def test_the_key_is_formatted_over_the_validated_arguments():
    assert REFUND.effect_key_of({"order_id": "ord_7", "amount_cents": 1}) == "refund:ord_7"
    long = dataclasses.replace(REFUND, effect_key="k:{order_id}" + "x" * 300)
    key = long.effect_key_of({"order_id": "ord_7", "amount_cents": 1})
    assert key is not None and key.startswith("sha256:") and len(key) == 71
    assert PLAIN.effect_key_of({"order_id": "ord_7"}) is None


@pytest.mark.parametrize(
    ("key", "window", "said"),
    [
        ("refund:{order}", 0.0, "'order', which is no field of RefundIn"),
        ("refund:{}", 0.0, "positional"),
        ("refund:{0}", 0.0, "positional"),
        ("refund", 0.0, "names no argument"),
        ("refund:{order_id", 0.0, "no format string"),
        ("refund:{order_id}", -1.0, "a window is 0 or more seconds"),
    ],
)
def test_a_key_naming_no_input_field_is_refused_at_registration(key, window, said):
    bad: Tool[Any, Any] = dataclasses.replace(REFUND, effect_key=key, effect_window_s=window)
    with pytest.raises(PluginError) as err:
        Registry([bad])
    assert err.value.code == "EFFECT_KEY_INVALID"
    assert said in str(err.value) and "refund version 1" in str(err.value)


def test_the_contract_describes_its_key():
    assert REFUND.describe()["effectKey"] == "refund:{order_id}"
    assert DAILY.describe()["effectWindowSeconds"] == 3600
    assert "effectKey" not in PLAIN.describe()  # unchanged for tools without one
    assert NOW  # the gate's clock is the shared one
