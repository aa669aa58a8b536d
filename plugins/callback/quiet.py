# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stdout callback of `make site`, `make check` and the other make targets (ansible.cfg).

Ansible's default callback printed each failure twice (an [ERROR] with the task's YAML source, then
the result) and folded a long message over several lines. This one prints each failure once: its
message whole, one line of the message per line of output, never folded, so an operator (or a test)
can search for an exact sentence; the other keys of the result follow as YAML. A debug message is
printed as it is. With -v and more it prints what the default callback prints.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: quiet
type: stdout
short_description: each failure once, its message whole and unfolded, without the task's source
version_added: 0.1.0
description:
  - The default callback with these changes, at verbosity 0 only.
  - "A failed task is printed once: C(fatal: [host]: FAILED! =>) and its message, each line of the
    message on one line of output (never folded), then the rest of the result as YAML; the task's
    YAML source and the exception Ansible adds are left out (-v shows them)."
  - "A host that does not answer is printed once: C(unreachable: [host] =>) and the connection's
    message on one line, without the task's source."
  - A debug task's message is printed as it is, a string on one line and a list one item a line.
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - set as the stdout callback (C(stdout_callback = vgpu.isolation.quiet) in ansible.cfg)
"""

import yaml
from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

# Keys of a failed result that repeat what the message says.
_TASK_FAILED = "Task failed: "
_REPEATS = ("msg", "changed", "failed", "evaluated_to", "exception", "invocation", "warnings", "deprecations")


def _plain(value):
    """The value as plain Python types (Ansible's tagged strings and other objects as str)."""
    if isinstance(value, dict):
        return dict((str(key), _plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


class _LiteralDumper(yaml.SafeDumper):
    """YAML that never folds: a string of several lines as a literal block, others on one line."""


def _represent_str(dumper, value):
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_LiteralDumper.add_representer(str, _represent_str)


def format_failure(head, result):
    """`head => message`, each line of a string message on its own line, then the rest as YAML."""
    result = _plain(dict((key, value) for key, value in result.items() if not str(key).startswith("_ansible")))
    message = result.get("msg")
    rest = dict((key, value) for key, value in result.items() if key not in _REPEATS)
    if message == "Assertion failed" or not isinstance(message, str):
        rest = dict(rest, msg=message) if message is not None else rest
        message = ""
    else:
        rest.pop("assertion", None)
    lines = [head + (" => " + message.splitlines()[0] if message else " =>")]
    lines += ["    " + line for line in message.splitlines()[1:]]
    if rest:
        dumped = yaml.dump(
            rest, Dumper=_LiteralDumper, default_flow_style=False, width=float("inf"), allow_unicode=True
        )
        lines += ["    " + line for line in dumped.splitlines()]
    return "\n".join(lines)


def format_message(head, message):
    """A debug message: a string as it is after `head => `, a list one item a line below it."""
    message = _plain(message)
    if isinstance(message, str):
        return head + " => " + message
    if isinstance(message, list) and all(isinstance(item, str) for item in message):
        return "\n".join([head + " =>"] + ["    " + item for item in message])
    return None


class CallbackModule(DefaultCallbackModule):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "vgpu.isolation.quiet"

    def _banner(self, result):
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._display.verbosity:
            return super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors=ignore_errors)
        if result.task.loop and "results" in result.result:
            # Each item's failure was printed (v2_runner_item_on_failed); not the task's source.
            result.result.pop("exception", None)
            return super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors=ignore_errors)
        self._banner(result)
        self._handle_warnings(result.result)
        text = format_failure("fatal: [%s]: FAILED!" % self.host_label(result), result.result)
        self._display.display(text, color=C.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))
        if ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_on_unreachable(self, result):
        if self._display.verbosity:
            return super(CallbackModule, self).v2_runner_on_unreachable(result)
        self._banner(result)
        self._handle_warnings(result.result)
        shown = dict(result.result)
        message = shown.get("msg")
        if isinstance(message, str) and message.startswith(_TASK_FAILED):  # ansible-core 2.19's prefix
            shown["msg"] = message.split(_TASK_FAILED, 1)[1]
        shown.pop("unreachable", None)
        text = format_failure("unreachable: [%s]" % self.host_label(result), shown)
        self._display.display(text, color=C.COLOR_UNREACHABLE, stderr=self.get_option("display_failed_stderr"))
        if result.task.ignore_unreachable:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_item_on_failed(self, result):
        if self._display.verbosity:
            return super(CallbackModule, self).v2_runner_item_on_failed(result)
        self._banner(result)
        self._handle_warnings(result.result)
        head = "failed: [%s] (item=%s)" % (self.host_label(result), self._get_item_label(result.result))
        loop_var = result.result.get("ansible_loop_var", "item")
        shown = dict((key, value) for key, value in result.result.items() if key not in ("ansible_loop_var", loop_var))
        text = format_failure(head, shown)
        self._display.display(text, color=C.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))

    def v2_runner_on_ok(self, result):
        message = result.result.get("msg")
        plain = (
            not self._display.verbosity
            and result.task.action in ("debug", "ansible.builtin.debug", "ansible.legacy.debug")
            and not (result.task.loop and "results" in result.result)
            and message is not None
            and self.get_option("display_ok_hosts")
        )
        text = format_message("ok: [%s]" % self.host_label(result), message) if plain else None
        if text is None:
            return super(CallbackModule, self).v2_runner_on_ok(result)
        self._banner(result)
        self._handle_warnings(result.result)
        self._display.display(text, color=C.COLOR_OK)
