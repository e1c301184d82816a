"""Headless Chromium for the page tests: Debian's ``chromium`` driven by Playwright's Python
API (``executable_path``; Playwright never downloads a browser here). Missing Chromium or
Playwright skips the tests locally and fails them under ``CI=true`` (``.ci/run`` installs
Chromium when it is missing)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["CHROMIUM_ARGS", "chromium_path", "launch"]

#: Flags for a machine without a screen or network: no sandbox (root in CI), no GPU, nothing
#: that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium_path() -> str | None:
    found = os.environ.get("WARRANT_CHROMIUM")
    if found:
        return found
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"browser tests cannot run under CI=true: {why}")
    pytest.skip(why)


def launch() -> Iterator[Any]:
    """A headless Chromium (a generator for a fixture)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
        return
    path = chromium_path()
    if path is None:
        _unavailable("no chromium on PATH (apt-get install chromium, or set WARRANT_CHROMIUM)")
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
