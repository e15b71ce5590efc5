"""Shared helpers of the Python suite (run by ctest as `python_tests`, or by hand:
PYTHONPATH=build/python CHORUS_CLI=build/chorus /usr/bin/python3 -m pytest python/tests)."""

import os
import shutil
import subprocess
import sys
import threading

import pytest

import chorus


@pytest.fixture
def run_group():
    """run_group(n, fn, **options): fn(comm) on n thread ranks; the results in rank order.
    Afterwards no rank thread is left running."""
    def run(n, fn, **options):
        options.setdefault("timeout", 60.0)
        before = threading.active_count()
        results = chorus.local_group(n, fn, **options)
        assert threading.active_count() == before
        return results
    return run


def chorus_cli():
    cli = os.environ.get("CHORUS_CLI") or shutil.which("chorus")
    if not cli:
        pytest.skip("no chorus CLI: set CHORUS_CLI to build/chorus")
    return cli


def run_process(args, timeout=120, env=None):
    """Runs a command to its end; nothing it started may outlive it (the launchers wait for
    their ranks)."""
    merged = dict(os.environ)
    merged.update(env or {})
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=merged,
                          stdin=subprocess.DEVNULL)


PYTHON = sys.executable
