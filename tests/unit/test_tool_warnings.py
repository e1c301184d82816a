"""A write whose contract has neither ``verify`` nor ``reconcile`` is warned about
(``warrant tools list`` / ``tools check``)."""

from __future__ import annotations

from warrant.tools._builtin import SAVE_PREFERENCE, WRITE_ARTIFACT


def test_a_write_with_neither_verify_nor_reconcile_is_warned_about():
    from warrant_demo.tools import LOOKUP, SAVE_DRAFT, SEND_NOTICE

    assert [w["code"] for w in SEND_NOTICE.warnings] == ["WRITE_UNCHECKED"]
    assert SAVE_DRAFT.warnings == [] and LOOKUP.warnings == []
    assert WRITE_ARTIFACT.warnings == [] and SAVE_PREFERENCE.warnings == []
