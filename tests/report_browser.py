"""Headless Chromium for the report tests: find it (skip locally, fail under CI) and run it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium_or_skip() -> str:
    """Debian's chromium, or a skip (a failure when ``CI`` is set: CI must run the test)."""
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make test installs Debian's chromium)")
        pytest.skip("Debian's chromium is not installed (make test installs it; CI requires it)")
    return found


def run_chromium(chromium: str, args: list[str], profile: Path) -> bytes:
    """Run headless Chromium with ``args`` and its own profile folder; its standard output."""
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return done.stdout
