"""tools/deepspeed_ops.py, which `make test` runs first, removes only a lock that no live build can hold."""

from __future__ import annotations

import os

import pytest

from tools.deepspeed_ops import STALE_AFTER_S, remove_stale_lock

pytestmark = pytest.mark.fast


def test_a_lock_older_than_any_build_is_removed(tmp_path):
    lock = tmp_path / "lock"
    lock.touch()
    old = lock.stat().st_mtime - STALE_AFTER_S - 1
    os.utime(lock, (old, old))
    assert remove_stale_lock(tmp_path)
    assert not lock.exists()


def test_a_fresh_lock_is_left_to_the_build_that_holds_it(tmp_path):
    lock = tmp_path / "lock"
    lock.touch()
    assert not remove_stale_lock(tmp_path)
    assert lock.exists()


def test_no_lock_no_build_folder_nothing_to_do(tmp_path):
    assert not remove_stale_lock(tmp_path / "never-built")
