"""Observe mode is loud: a worker whose deployment observes tools (``WARRANT_OBSERVE_TOOLS``)
says so in its log when it is ready, as a warning (``docs/observe-mode.md``)."""

from __future__ import annotations

import logging

from celery.signals import worker_ready

from warrant.runner.settings import WarrantSettings, load_settings

__all__ = ["observe_warning"]

log = logging.getLogger("warrant.observe")


def observe_warning(settings: WarrantSettings) -> str | None:
    """The warning a worker logs at start (``None``: observe mode is off)."""
    observed = settings.observed_tools
    if not observed:
        return None
    which = "EVERY tool" if "*" in observed else ", ".join(sorted(observed))
    return (
        f"OBSERVE MODE (WARRANT_OBSERVE_TOOLS): the gate lets through calls of {which} that "
        "it would refuse for lack of a grant, and traces each as gate.would_refuse; "
        "see `warrant gate report`"
    )


@worker_ready.connect
def _warn_at_start(**_: object) -> None:
    warning = observe_warning(load_settings())
    if warning is not None:
        log.warning(warning)
