"""tests/polling.py wait_for, the one poll loop of every suite (issue 26 item 7)."""

from __future__ import annotations

import itertools

import pytest

from tests.polling import wait_for


def test_it_polls_until_the_check_gives_a_result_and_returns_it():
    answers = iter([None, False, 0])  # 0 is a result: only None and False mean "not yet"
    assert wait_for("a result", lambda: next(answers), timeout=60, interval=0) == 0


def test_its_timeout_names_what_was_awaited_and_what_was_last_seen():
    free = itertools.count(118)
    with pytest.raises(TimeoutError, match=r"waiting for 122 free units \(last seen: 119 free\)$"):
        wait_for("122 free units", lambda: next(free) == 122 or None, timeout=0, seen=lambda: f"{next(free)} free")


def test_without_a_last_seen_its_timeout_names_what_was_awaited():
    with pytest.raises(TimeoutError, match=r"waiting for the socket$"):
        wait_for("the socket", lambda: None, timeout=0)
