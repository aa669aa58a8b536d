"""The stdout callback vgpu.isolation.quiet (issue 41): each failure once, its message whole and on
one line per line, without the task's YAML source. Operators and tests/k8s/test_day_two.py search
the output for exact sentences, which a folded YAML scalar split over two lines."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.vgpu.isolation.plugins.callback.quiet import format_failure, format_message

ROOT = Path(__file__).resolve().parents[4]
SENTENCE = (
    "edge-gpu-2: vgpu_sample_app_quota is 51200 MiB, more than any GPU of the cluster offers: the largest, "
    "edge-gpu-1's GPU 0 with 23028 MiB, offers 230 units of 100 MiB = 23000 MiB; lower the quota to 23000 MiB "
    "or less, or give the node a larger GPU, and run make check again (docs/variables.md, vgpu_sample_app_quota)"
)

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Fail with a long sentence
      ansible.builtin.fail:
        msg: "{{ sentence }}"
"""
LOOP = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Fail with a long sentence for one item
      ansible.builtin.fail:
        msg: "{{ sentence }}"
      loop: [1, 2]
      when: item == 2
"""


def test_a_long_message_is_one_line():
    assert len(SENTENCE) > 250
    text = format_failure("fatal: [edge-cp-1]: FAILED!", {"msg": SENTENCE, "changed": False, "_ansible_no_log": False})
    assert text == f"fatal: [edge-cp-1]: FAILED! => {SENTENCE}"


def test_a_report_keeps_each_line_whole_and_drops_what_repeats_the_message():
    report = f"The settings have 2 problem(s); nothing was changed.\n  - {SENTENCE}\n  - {SENTENCE[::-1]}"
    result = {"msg": report, "assertion": "vgpu_report | length == 0", "evaluated_to": False, "changed": False}
    lines = format_failure("fatal: [cp]: FAILED!", result).splitlines()
    assert lines == [
        "fatal: [cp]: FAILED! => The settings have 2 problem(s); nothing was changed.",
        f"      - {SENTENCE}",
        f"      - {SENTENCE[::-1]}",
    ]


def test_a_command_s_output_follows_the_message_as_yaml_never_folded():
    long_stderr = "dpkg was interrupted " + "x" * 300
    text = format_failure("fatal: [n]: FAILED!", {"msg": "non-zero return code", "rc": 100, "stderr": long_stderr})
    assert text.splitlines() == [
        "fatal: [n]: FAILED! => non-zero return code",
        "    rc: 100",
        f"    stderr: {long_stderr}",
    ]
    text = format_failure("fatal: [n]: FAILED!", {"msg": "boom", "stdout": "line 1\nline 2"})
    assert text.splitlines()[1:] == ["    stdout: |-", "      line 1", "      line 2"]


def test_an_assertion_without_a_message_keeps_the_assertion():
    text = format_failure("fatal: [n]: FAILED!", {"msg": "Assertion failed", "assertion": "x == 1"})
    assert "assertion: x == 1" in text and "msg: Assertion failed" in text


def test_a_debug_message_is_printed_as_it_is():
    assert format_message("ok: [cp]", SENTENCE) == f"ok: [cp] => {SENTENCE}"
    assert format_message("ok: [cp]", ["driver: not loaded", "GPUs: none"]) == (
        "ok: [cp] =>\n    driver: not loaded\n    GPUs: none"
    )
    assert format_message("ok: [cp]", {"a": 1}) is None, "anything else as the default callback prints it"


UNREACHABLE = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Reach the host
      ansible.builtin.ping:
      ignore_unreachable: true
"""
# A host nothing answers for: SSH to a closed port of this machine is refused at once.
GONE = "gone ansible_host=127.0.0.1 ansible_port=9 ansible_connection=ssh ansible_ssh_common_args='-o ConnectTimeout=5'"


def playbook(
    tmp_path: Path, callback: str, play: str = PLAY, inventory: str = "localhost,", returncode: int = 2
) -> str:
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "vars.json").write_text(
        json.dumps({"sentence": SENTENCE, "ansible_python_interpreter": sys.executable})
    )
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK=callback, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / "build" / "pytest-collections")
    if inventory != "localhost,":
        (tmp_path / "hosts.ini").write_text(inventory + "\n")
        inventory = "hosts.ini"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", inventory, "play.yml", "-e", "@vars.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == returncode, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_failure_is_printed_once_on_one_line_without_the_task_s_source(tmp_path):
    out = playbook(tmp_path, "vgpu.isolation.quiet")
    assert f"fatal: [localhost]: FAILED! => {SENTENCE}\n" in out, out
    assert out.count("vgpu_sample_app_quota is 51200 MiB") == 1
    assert "Origin:" not in out and "^ column" not in out and "ansible.builtin.fail:" not in out


def test_the_default_callback_printed_it_twice_with_the_source(tmp_path):
    """What the quiet callback replaces (ansible-core 2.19)."""
    out = playbook(tmp_path, "ansible.builtin.default")
    assert out.count("vgpu_sample_app_quota is 51200 MiB") == 2 and "Origin:" in out


def test_ansible_cfg_sets_it():
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    assert config["defaults"]["stdout_callback"] == "vgpu.isolation.quiet"


def test_an_item_s_failure_is_printed_once_on_one_line_too(tmp_path):
    out = playbook(tmp_path, "vgpu.isolation.quiet", LOOP)
    assert f"failed: [localhost] (item=2) => {SENTENCE}\n" in out, out
    assert out.count("vgpu_sample_app_quota is 51200 MiB") == 1
    assert "Origin:" not in out and "ansible_loop_var" not in out


def test_an_unreachable_host_is_printed_once_on_one_line_without_the_task_s_source(tmp_path):
    """preflight reaches every host with ignore_unreachable and names the ones that did not answer
    in its report; the default callback printed each such host three times there, twice with the
    task's source (seen with make site on the example inventory, 2026-12-05)."""
    out = playbook(tmp_path, "vgpu.isolation.quiet", UNREACHABLE, GONE, returncode=0)
    assert "unreachable: [gone] => " in out and "port 9: Connection refused\n" in out, out
    assert out.count("Connection refused") == 1, out
    assert "Origin:" not in out and "^ column" not in out and "Task failed" not in out, out
    assert "...ignoring" in out
