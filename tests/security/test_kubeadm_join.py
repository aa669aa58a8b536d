"""Issue 12 finding 9: the kubeadm join token never appears on a command line.

The kubeadm role's join tasks run for real (ansible-playbook on localhost) against a stand-in
`kubeadm` on PATH (no cluster can be joined here): it records every command line it is given and,
for `join --config`, the file's mode and content at that moment.
"""

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from role_render import role_tasks_play, run_playbook

BOOTSTRAP = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "0" * 64
CERT_KEY = "f" * 64

FAKE_KUBEADM = f"""#!/usr/bin/env python3
import json, os, sys
log = os.environ["FAKE_KUBEADM_LOG"]
entry = {{"argv": sys.argv[1:]}}
if sys.argv[1:3] == ["token", "create"]:
    print("kubeadm join 10.0.0.10:6443 --token {BOOTSTRAP} --discovery-token-ca-cert-hash {CA_HASH} ")
elif sys.argv[1:4] == ["init", "phase", "upload-certs"]:
    print("[upload-certs] Using certificate key:")
    print("{CERT_KEY}")
elif sys.argv[1] == "join" and "--config" in sys.argv:
    path = sys.argv[sys.argv.index("--config") + 1]
    entry["config_mode"] = os.stat(path).st_mode & 0o777
    entry["config"] = open(path).read()
with open(log, "a") as handle:
    handle.write(json.dumps(entry) + "\\n")
"""


INVENTORY = """
all:
  children:
    k8s_control_plane:
      hosts:
        localhost: {}
"""


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    if Path("/etc/kubernetes/kubelet.conf").exists():
        pytest.skip("this machine joined a cluster: the join tasks would be skipped")
    tmp = tmp_path_factory.mktemp("join")
    tools = tmp / "bin"
    tools.mkdir()
    kubeadm = tools / "kubeadm"
    kubeadm.write_text(FAKE_KUBEADM)
    kubeadm.chmod(0o755)
    (tmp / "play.yml").write_text(
        role_tasks_play("Join as the kubeadm role does", "kubeadm", "join.yml", facts={"nodename": "edge-1"})
    )
    (tmp / "hosts.yml").write_text(INVENTORY)
    log = tmp / "kubeadm.log"
    config = tmp / "join.yaml"
    os.environ["FAKE_KUBEADM_LOG"] = str(log)
    try:
        run_playbook(
            "-i",
            str(tmp / "hosts.yml"),
            str(tmp / "play.yml"),
            # A worker: a control plane would also write the scheduler configuration under /etc.
            "-e",
            # The kubeadm role's variables, so the settings check wants the kubeadm flavour.
            json.dumps(
                {
                    "kubeadm_join_config_path": str(config),
                    "kubeadm_is_control_plane": False,
                    "vgpu_kubernetes_flavour": "kubeadm",
                }
            ),
            path_prefix=str(tools),
        )
    finally:
        del os.environ["FAKE_KUBEADM_LOG"]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return calls, config


def test_no_command_line_carries_the_token(joined):
    calls, _config = joined
    assert [c["argv"][0] for c in calls] == ["token", "join"]
    for call in calls:
        assert not any(BOOTSTRAP in arg for arg in call["argv"]), call["argv"]


def test_join_reads_the_token_from_a_private_file_that_is_removed_after(joined):
    calls, config = joined
    join = calls[-1]
    assert join["argv"] == ["join", "--config", str(config)]
    assert stat.S_IMODE(join["config_mode"]) == 0o600
    assert BOOTSTRAP in join["config"] and "edge-1" in join["config"] and CA_HASH in join["config"]
    assert not config.exists(), "the join configuration holds the token: it must not stay on the node"


def test_the_join_configuration_is_the_kind_kubeadm_reads(joined):
    calls, _config = joined
    document = yaml.safe_load(calls[-1]["config"])
    assert document["kind"] == "JoinConfiguration"
    assert document["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "10.0.0.10:6443",
        "token": BOOTSTRAP,
        "caCertHashes": [CA_HASH],
    }
    assert document["nodeRegistration"]["name"] == "edge-1"
    assert "controlPlane" not in document
