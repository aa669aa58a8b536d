"""The offline bundle's K3s part (issue 14 item 8), at the configuration level.

K3s's release downloads cannot be reached from here (docs/testing.md), so this checks what the part
would download and where it puts it, rendered by Ansible from the role's own variables: the places
the k3s role and preflight's completeness check read.
"""

import json
import sys

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.bundle import bundle_problems
from role_render import role_play, run_playbook


@pytest.mark.parametrize(("arch", "binary", "machine"), [("amd64", "k3s", "x86_64"), ("arm64", "k3s-arm64", "aarch64")])
def test_the_k3s_part_fetches_the_pinned_release_where_the_k3s_role_reads_it(tmp_path, arch, binary, machine):
    out = tmp_path / "downloads.json"
    keep = {"content": "{{ offline_bundle_k3s_downloads | to_json }}", "dest": str(out), "mode": "0644"}
    (tmp_path / "play.yml").write_text(role_play("offline_bundle", [{"ansible.builtin.copy": keep}]))
    settings = {
        "vgpu_k3s_version": "v1.31.4+k3s1",
        "offline_bundle_k3s_arch": arch,
        "ansible_python_interpreter": sys.executable,
    }
    run_playbook("-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(settings))
    downloads = json.loads(out.read_text())
    release = "https://github.com/k3s-io/k3s/releases/download/v1.31.4%2Bk3s1"
    assert downloads == [
        {
            "url": f"{release}/{binary}",
            "dest": f"k3s/{binary}",
            "checksum": f"sha256:{release}/sha256sum-{arch}.txt",
            "mode": "0755",
        },
        {
            "url": f"{release}/k3s-airgap-images-{arch}.tar.zst",
            "dest": f"k3s/k3s-airgap-images-{arch}.tar.zst",
            "checksum": f"sha256:{release}/sha256sum-{arch}.txt",
            "mode": "0644",
        },
    ]
    # What preflight asks of a K3s node of that architecture is exactly what the part fetches.
    host = {"flavour": "k3s", "architecture": machine, "roles": ["cluster"]}
    assert bundle_problems([d["dest"] for d in downloads], host) == []
    assert bundle_problems([], host)
