"""bench/gil_shares.py: py-spy's folded stacks of the extender summed into the benchmark table's parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gil_shares import main, shares

LOOP = "thread (100): extender-http;Thread._bootstrap (threading.py:1002);run (asyncio/runners.py:190)"


def test_a_sample_goes_to_its_threads_part_or_to_its_leaf_most_frame_that_has_one() -> None:
    """py-spy 0.4's folded format (as it wrote it for a Python 3.11 process here): the watch
    threads by name whatever they run; on the loop thread JSON before the verb that called it, the
    model before the verb, the verb before the HTTP layer around it."""
    lines = [
        "thread (200): sync-pods;Informer.run (vgpu_components/kube.py:218);loads (json/__init__.py:346) 7",
        "thread (201): sync-nodes;Informer.run (vgpu_components/kube.py:223) 1",
        f"{LOOP};_call (vgpu_components/extender_http.py:466);loads (json/__init__.py:346) 3",
        f"{LOOP};_dispatch (vgpu_components/extender_http.py:417);filter (vgpu_components/extender_verbs.py:155);"
        "tightest (vgpu_components/scheduling.py:547) 5",
        f"{LOOP};_dispatch (vgpu_components/extender_http.py:417);_answer (vgpu_components/extender_verbs.py:260) 2",
        f"{LOOP};_one_request (vgpu_components/extender_http.py:351);readexactly (vgpu_components/tls.py:133) 4",
        f"{LOOP};_run_once (asyncio/base_events.py:1922) 6",
        "process 1:python -m vgpu_components.extender;" + LOOP + ";_post (vgpu_components/extender_poster.py:90) 1",
        "thread (300): extender-tls-0;do_handshake (ssl.py:975) 2",
        "thread (1);<module> (<frozen runpy>:88) 1",
        "",
        "not a sample line",
    ]
    assert dict(shares(lines)) == {
        "pod watch: reading, JSON decoding, the model's update": 7,
        "node watch (kwok's heartbeats)": 1,
        "JSON decoding and encoding": 3,
        "the model: filter's admitted/tightest, bind's reserve": 5,
        "the verbs' own code (arguments, answers)": 2,
        "TLS records of kube-scheduler's connections": 4,
        "asyncio's loop: selector, callbacks, transports": 6,
        "bind: messages to and from the poster": 1,
        "TLS handshakes (their worker threads)": 2,
        "other": 1,
    }


def test_the_summary_prints_shares_and_ms_per_pod_and_refuses_an_empty_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "extender-gil-1.txt"
    profile.write_text(f"{LOOP};_run_once (asyncio/base_events.py:1922) 3\nthread (200): sync-pods;x (y.py:1) 1\n")
    assert main([str(profile), "--pods", "8"]) == 0
    out = capsys.readouterr().out
    assert "4 samples" in out
    assert " 75.0%  asyncio's loop: selector, callbacks, transports  1.500 ms/pod" in out
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main([str(empty)]) == 1
    assert "no samples" in capsys.readouterr().err
