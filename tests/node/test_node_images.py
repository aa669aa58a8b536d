"""Day two on an air-gapped node: an image of the offline bundle that containerd lost comes back.

kubelet's image GC deletes images no running container uses once the image filesystem passes its
high threshold (85%), and containerd before 1.7 pins none of them, not even the pause image every
new pod needs; an air-gapped node cannot pull it back (docs/operations.md, "Air-gapped sites").
Rerunning site.yml, or only its image steps, must import it again from the bundle, and a run with
nothing missing must change nothing. Runs on both scheduling paths; it comes last in the suite
(file order), and verify_cluster.yml and the second site.yml then run on the mended node.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import recap
from tests.node import node

ROOT = Path(__file__).resolve().parents[2]
# The pause image of the bundle's control-plane images (roles/kubeadm: kubeadm_pause_image).
PAUSE = "registry.k8s.io/pause:3.10.2"


def containerd_images() -> list[str]:
    return node.exec_node("ctr", "-n", "k8s.io", "images", "list", "-q").split()


def image_steps_of_site() -> str:
    """site.yml with only its image steps, as docs/operations.md tells an operator to mend a node."""
    cmd = [
        "ansible-playbook",
        "-i",
        str(ROOT / "tests/node/inventory.yml"),
        str(ROOT / "playbooks/site.yml"),
        "--tags",
        "kubeadm_images,vgpu_stack_image",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=os.environ)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result.stdout


def test_a_lost_pause_image_is_imported_again_from_the_bundle(namespace: str) -> None:
    """ctr removes the pause image as kubelet's image GC would; the image steps of site.yml import
    it again (one change), a new pod's sandbox starts from it, and a second run changes nothing."""
    assert PAUSE in containerd_images()
    node.exec_node("ctr", "-n", "k8s.io", "images", "rm", PAUSE)
    assert PAUSE not in containerd_images()

    mended = image_steps_of_site()
    assert PAUSE in containerd_images()
    assert recap.changed_count(mended, node.NODE) == 1, mended[-3000:]
    pod = node.app_pod("after-mend", ["sleep", "600"])
    # The node keeps GPU pods only (vgpu_gpu_node_taint in tests/node/group_vars/all.yml).
    pod["spec"]["tolerations"] = [{"key": node.RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    node.apply(namespace, pod)
    node.wait_for(
        "a new pod Running on the mended node",
        lambda: all(node.running(p) for p in node.pods(namespace)) or None,
        timeout=180,
    )
    assert recap.changed_count(image_steps_of_site(), node.NODE) == 0
