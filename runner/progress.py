"""Progress, as pure counts over a run's earlier proposals (the gate's loop layer,
:mod:`warrant.runner.policy`): the same proposal again, a cycle of proposals, and proposals in a
row that added no new observation. ``history`` holds the run's earlier tool proposals (their
fingerprints and the observation version each was made at), oldest first."""

from __future__ import annotations

from collections.abc import Sequence

from warrant.runner.views import HistoryEntry

__all__ = ["cycle_period", "repeats", "without_progress"]


def repeats(fp: str, history: Sequence[HistoryEntry], *, version: int) -> int:
    """1 + earlier proposals with this fingerprint and no new observation since."""
    return 1 + sum(1 for h in history if h.fingerprint == fp and h.observation_version == version)


def cycle_period(
    fp: str, history: Sequence[HistoryEntry], *, version: int, max_period: int
) -> int | None:
    """The period of a cycle this proposal completes twice (A-B-A-B, A-B-C-A-B-C, ... up to
    ``max_period``) with no new observation since it began; None if there is none."""
    seq = [h.fingerprint for h in history if h.observation_version == version] + [fp]
    for period in range(2, max_period + 1):
        tail = seq[-2 * period :]
        cycle = tail[period:]
        if len(tail) == 2 * period and tail[:period] == cycle and len(set(cycle)) == period:
            return period
    return None


def without_progress(history: Sequence[HistoryEntry], *, version: int) -> int:
    """This proposal and the earlier ones made since the last new observation."""
    return 1 + sum(1 for h in history if h.observation_version == version)
