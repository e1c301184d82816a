"""How a write's success is checked: a write declares ``verify``, ``reconcile`` or
``unverified=True`` with a reason, else the registry refuses it (``WRITE_UNVERIFIED``); an
unverified write is warned about and described as such (``warrant tools list``)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.typed_tool import TOOL as TYPED
from warrant.runner.codes import ErrorCode
from warrant.runner.errors import PluginError
from warrant.tools import SideEffect
from warrant.tools._builtin import BUILTIN_TOOLS, DELEGATE, SAVE_PREFERENCE, WRITE_ARTIFACT
from warrant.tools._contract import verification_problem
from warrant.tools._registry import Registry


def test_an_unverified_write_is_warned_about_with_its_reason():
    from warrant_demo.tools import LOOKUP, SAVE_DRAFT, SEND_NOTICE

    [warning] = SEND_NOTICE.warnings
    assert warning["code"] == "WRITE_UNVERIFIED" and "no status query" in warning["message"]
    described = SEND_NOTICE.describe()
    assert described["verification"] == "unverified"
    assert described["unverifiedReason"] == SEND_NOTICE.unverified_reason
    assert SAVE_DRAFT.warnings == [] and LOOKUP.warnings == []
    assert WRITE_ARTIFACT.warnings == [] and SAVE_PREFERENCE.warnings == []
    assert SAVE_PREFERENCE.describe()["verification"] == "verify"  # read back, not only looked up
    assert "unverifiedReason" not in SAVE_PREFERENCE.describe()
    assert LOOKUP.describe()["verification"] == "read"


@pytest.mark.parametrize(
    "side_effect",
    [SideEffect.IDEMPOTENT_WRITE, SideEffect.COMPENSATABLE_WRITE, SideEffect.IRREVERSIBLE],
)
def test_a_write_with_no_postcondition_is_refused_at_registration(side_effect):
    bare = dataclasses.replace(
        TYPED, name="bare_write", side_effect=side_effect, verify=None, reconcile=None
    )
    with pytest.raises(PluginError) as caught:
        Registry([bare])
    assert caught.value.code == ErrorCode.WRITE_UNVERIFIED
    assert "bare_write" in str(caught.value) and "unverified_reason" in str(caught.value)


def test_a_write_may_say_it_is_unverified_with_a_reason_and_only_so():
    base = dataclasses.replace(
        TYPED, name="w", side_effect=SideEffect.IRREVERSIBLE, verify=None, reconcile=None
    )
    said = dataclasses.replace(base, unverified=True, unverified_reason="no read API")
    assert verification_problem(said) is None and Registry([said]).unverified() == {("w", "1")}
    no_reason = dataclasses.replace(base, unverified=True, unverified_reason="  ")
    assert "without an unverified_reason" in str(verification_problem(no_reason))
    both = dataclasses.replace(said, verify=lambda a, o, c: True)
    assert "also verify or reconcile" in str(verification_problem(both))
    checked = dataclasses.replace(base, verify=lambda a, o, c: True)
    assert verification_problem(checked) is None and not Registry([checked]).unverified()
    read = dataclasses.replace(base, side_effect=SideEffect.READ)
    assert verification_problem(read) is None


def test_every_built_in_write_declares_how_it_is_checked():
    for tool in BUILTIN_TOOLS:
        assert verification_problem(tool) is None, tool.name
    assert SAVE_PREFERENCE.verify is not None  # read back from long-term memory
    assert DELEGATE.unverified and DELEGATE.unverified_reason
