"""The one-live-attempt lease judges a holder by its process identity, never by node name."""

from __future__ import annotations

import subprocess
from dataclasses import replace

from warrant.broker.process_identity import process_started, this_process
from warrant.broker.tool.lease import Holder, holder_lost, holder_of, worker_label


def here() -> Holder:
    found = holder_of(worker_label("tool@host", this_process()))
    assert found is not None
    return found


def test_a_label_carries_pid_start_time_and_pid_space():
    me = this_process()
    holder = here()
    assert (holder.node, holder.pid, holder.started, holder.space) == (
        "tool@host",
        me.pid,
        me.started,
        me.space,
    )
    assert me.started == process_started(me.pid) and len(me.space) == 16


def test_a_dead_process_in_this_pid_space_is_lost_and_a_live_one_is_not():
    child = subprocess.Popen(["sleep", "30"])
    try:
        started = process_started(child.pid)
        theirs = Holder("another@name", child.pid, started, this_process().space)
        assert not holder_lost(theirs, here=here())
    finally:
        child.kill()
        child.wait()
    assert holder_lost(theirs, here=here())


def test_a_holder_in_another_pid_space_is_never_judged_by_pid():
    """Two hosts with one host name (and one node name): the pid means nothing here."""
    child = subprocess.Popen(["true"])
    child.wait()  # this pid is gone on this machine
    twin = Holder("tool@host", child.pid, 1, "0123456789abcdef")
    assert not holder_lost(twin, here=here())
    assert not holder_lost(replace(here(), space="0123456789abcdef"), here=here())


def test_a_reused_pid_is_not_the_holder():
    me = this_process()
    earlier = Holder("tool@host", me.pid, me.started - 1, me.space)  # same pid, other process
    assert holder_lost(earlier, here=replace(here(), pid=me.pid + 1))


def test_this_very_process_holding_it_means_its_attempt_is_over():
    assert holder_lost(here(), here=here())


def test_labels_of_an_earlier_release_are_presumed_alive():
    old = holder_of(f"tool@host/{this_process().pid}")
    assert old == Holder("tool@host", this_process().pid)
    assert not holder_lost(old, here=here())
    assert holder_of("garbage") == Holder("garbage", None)
