"""Issue 12 finding 9: module inputs that a hostile or careless inventory can turn into a traceback
or into options of the tools the modules run.
"""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.modules import apt_download
from role_render import render


def test_a_sample_command_with_shell_variables_is_kept_as_written(tmp_path):
    # Before the fix: str.format read "${HOME}" as a format field and raised KeyError (a traceback).
    # The sample pod is vgpu_stack's template now: "${HOME}" and "{a,b}" stay as written, quoted.
    command = "cd ${HOME} && /opt/vgpu/vgpu-memory-usage {use_mib} 5 && echo {quota_mib} {a,b} 'q' \"d\""
    (pod,) = render(tmp_path, {"vgpu_stack_sample_command": command})["sample-pod.yaml"]
    assert pod["spec"]["containers"][0]["command"] == [
        "/bin/sh",
        "-c",
        "cd ${HOME} && /opt/vgpu/vgpu-memory-usage 1200 5 && echo 3000 {a,b} 'q' \"d\"",
    ]


class RecordingModule:
    """Just what apt_download calls on its AnsibleModule; records the commands instead of running apt."""

    def __init__(self):
        self.commands = []

    def run_command(self, args, **_kwargs):
        self.commands.append(list(args))
        return 0, "bash\n  Depends: libc6\nlibc6\n", ""

    def fail_json(self, **kwargs):
        raise AssertionError(kwargs)


def test_package_names_reach_apt_after_the_end_of_options():
    module = RecordingModule()
    apt_download.closure_of(module, ["bash"], recurse=True)
    (command,) = module.commands
    assert command[-2:] == ["--", "bash"], command


@pytest.mark.parametrize("name", ["-oDir::Cache=/tmp/evil", "--allow-unauthenticated", "bash;rm", "Bash", ""])
def test_a_package_name_that_is_no_debian_name_is_refused(name, tmp_path, capsys):
    with patch_module_args({"packages": [name], "dest": str(tmp_path)}), pytest.raises(SystemExit):
        apt_download.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"]
    assert repr(name) in out["msg"] and "Debian package name" in out["msg"], out["msg"]
