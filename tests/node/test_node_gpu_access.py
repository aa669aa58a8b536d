"""Only containers with a quota reach a GPU (issue 28, part A), on a real node through a real kubelet.

A pod that asks for no GPU memory used to get every GPU of the node by setting
NVIDIA_VISIBLE_DEVICES=all in its own environment: nvidia is containerd's default runtime, and the
NVIDIA runtime as shipped takes that variable from unprivileged containers. The runtime now takes a
container's devices only from the contract's device-list mount (the device plugin's Allocate, the
DRA driver's CDI device) or from a privileged container's environment, so here:

- a pod without units that sets NVIDIA_VISIBLE_DEVICES=all sees no GPU: no /dev/nvidia*, no driver
  library, NVML (nvidia-smi's library) does not load; the same with a CDI annotation on the pod;
- a sidecar without units in a GPU pod sees none while its GPU sibling sees its one GPU;
- the GPU container runs with LD_PRELOAD=/opt/vgpu/libvgpu.so (issue 24's dlopen-by-path case), and
  programs that are no CUDA programs (a shell, ls) run in it as before;
- a GPU container gets none of the driver's graphics files (its OpenGL, EGL and Vulkan libraries,
  the loaders' configuration, the GPU's DRM nodes), even asking for every capability, while the
  node's vgpu_graphics_enabled is off (issue 38; the runtime role's runc-without-graphics);
- the components, which read NVML, still run;
- the remaining way in, a hostPath of /dev/null at the device-list path, is refused by the role's
  admission policy vgpu-tenant-pods in tenant namespaces (issue 40 item 4).

Runs on both scheduling paths (units of the device plugin, or a DRA claim). The node has no GPU:
libvgpu's fake driver stands in (tests/node/fake_gpu.yml), handed to containers by a static CDI
specification exactly as the NVIDIA runtime's cdi mode hands the real one; tests/gpu/kubelet runs
the same pods on the H200 with the runtime's default jit-cdi mode.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.node import node

HERE = Path(__file__).resolve().parent
# What a container reaches of the GPU (device files, driver libraries, NVML), and issue 24's program
# that opens the real driver by its path: scripts the harness of tests/gpu/kubelet runs too.
PROBE = (HERE / "gpu_probe.py").read_text()
DLOPEN_BY_PATH = (HERE / "dlopen_by_path.py").read_text()
SLEEP = ["sleep", "86400"]
ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
# The node carries vgpu_gpu_node_taint's taint (tests/node/group_vars/all.yml). A pod may tolerate any
# taint: the taint places pods, it guards nothing, so the pods without units below tolerate it and
# must still get no GPU.
TOLERATE = [{"key": node.RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]


def no_units_pod(name: str) -> dict[str, Any]:
    """A pod without units that names every GPU in its env and tolerates the GPU node's taint."""
    pod = node.app_pod(name, SLEEP)
    pod["spec"]["containers"][0]["env"] = ALL
    pod["spec"]["tolerations"] = TOLERATE
    return pod


def probe(namespace: str, pod: str, container: str = "app") -> dict[str, Any]:
    out = node.kubectl("exec", "-n", namespace, pod, "-c", container, "--", "python3", "-c", PROBE)
    return dict(json.loads(out.strip().splitlines()[-1]))


def running(namespace: str, name: str) -> None:
    node.wait_for(f"{name} Running", lambda: node.running(node.get("pod", name, namespace)), timeout=240)


def assert_no_gpu(seen: dict[str, Any], who: str) -> None:
    assert seen["devices"] == [], f"{who} got GPU device files: {seen}"
    assert seen["driver_libraries"] == [], f"{who} got the driver's libraries: {seen}"
    assert not isinstance(seen["nvml"], int), f"{who} reads {seen['nvml']} GPU(s) through NVML: {seen}"


def test_a_pod_without_units_that_asks_for_every_gpu_by_env_gets_none(namespace: str) -> None:
    """NVIDIA_VISIBLE_DEVICES=all in the pod's own env: no device file, no driver library, no NVML."""
    node.apply(namespace, no_units_pod("no-units"))
    running(namespace, "no-units")
    assert_no_gpu(probe(namespace, "no-units"), "a pod without units")


def test_a_pod_without_units_gets_no_gpu_through_a_cdi_annotation(namespace: str) -> None:
    """The runtime's cdi mode also takes devices from cdi.k8s.io/ annotations of the container: a
    pod's own annotations must not reach it (containerd passes none to the runtime unless its
    runtime options list them in pod_annotations, which the roles never set)."""
    pod = no_units_pod("annotated")
    pod["metadata"]["annotations"] = {"cdi.k8s.io/vgpu-test": "nvidia.com/gpu=all"}
    node.apply(namespace, pod)
    running(namespace, "annotated")
    assert_no_gpu(probe(namespace, "annotated"), "a pod with a CDI annotation")


def test_a_sidecar_without_units_sees_no_gpu_beside_its_gpu_sibling(namespace: str) -> None:
    """One pod, two containers: `app` with a 3000 MiB quota sees its one GPU (its device file, the
    driver, NVML with one device) and runs with libvgpu preloaded; `sidecar`, without units and with
    NVIDIA_VISIBLE_DEVICES=all, sees nothing of the GPU."""
    *claims, pod = node.quota_pod("pair", 3000, SLEEP)
    pod["spec"]["containers"].append(
        {"name": "sidecar", "image": node.IMAGE, "imagePullPolicy": "Never", "command": SLEEP, "env": ALL}
    )
    node.apply(namespace, *claims, pod)
    running(namespace, "pair")

    gpu = probe(namespace, "pair", "app")
    assert [d for d in gpu["devices"] if d != "/dev/nvidiactl"] in (["/dev/nvidia0"], ["/dev/nvidia1"]), gpu
    assert gpu["driver_libraries"], gpu
    assert gpu["nvml"] == 1, gpu
    assert gpu["ld_preload"] == "/opt/vgpu/libvgpu.so", gpu
    assert_no_gpu(probe(namespace, "pair", "sidecar"), "a sidecar without units")


def test_a_gpu_container_gets_no_graphics_files_even_asking_for_every_capability(namespace: str) -> None:
    """Issue 38: the NVIDIA runtime's cdi modes hand every GPU container the driver's graphics files
    whatever its NVIDIA_DRIVER_CAPABILITIES (here the node's CDI specification lists stand-ins for
    them, tests/node/fake_gpu.yml); with graphics withheld it gets its GPU and none of them."""
    *claims, pod = node.quota_pod("graphics", 1000, SLEEP)
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]
    node.apply(namespace, *claims, pod)
    running(namespace, "graphics")
    seen = probe(namespace, "graphics")
    assert seen["nvml"] == 1 and seen["driver_libraries"], seen
    assert seen["graphics"] == [], seen


def test_programs_that_are_not_cuda_programs_run_with_libvgpu_preloaded(namespace: str) -> None:
    """LD_PRELOAD=/opt/vgpu/libvgpu.so reaches every process of a GPU container: a shell and ls
    behave as without it (same output, nothing on stderr, a child's exit status kept)."""
    *claims, pod = node.quota_pod("preloaded", 1000, SLEEP)
    node.apply(namespace, *claims, pod)
    running(namespace, "preloaded")

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        cmd = ["docker", "exec", node.NODE, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]
        cmd += ["exec", "-n", namespace, "preloaded", "--", *command]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)

    # kubectl exec reports a non-zero exit status on stderr itself: a child's status is echoed instead.
    shell = run("sh", "-c", 'echo "$LD_PRELOAD"; ls -d /opt/vgpu/libvgpu.so; sh -c "exit 3"; echo "status $?"')
    want = "/opt/vgpu/libvgpu.so\n/opt/vgpu/libvgpu.so\nstatus 3\n"
    assert (shell.returncode, shell.stdout, shell.stderr) == (0, want, "")


def test_a_program_that_opens_the_real_driver_by_its_path_stays_in_its_quota(namespace: str) -> None:
    """Issue 24, case 5: with only LD_LIBRARY_PATH=/opt/vgpu, a program that dlopens the driver by
    the absolute path allocated 3000 MiB under a 1000 MiB quota; libvgpu preloaded answers its
    dlsym with the hooks, and the allocation is refused at the call."""
    *claims, pod = node.quota_pod("by-path", 1000, ["python3", "-c", DLOPEN_BY_PATH, "3000"])
    node.apply(namespace, *claims, pod)

    def finished() -> str | None:
        phase = node.get("pod", "by-path", namespace)["status"].get("phase")
        return str(phase) if phase in ("Failed", "Succeeded") else None

    phase = node.wait_for("by-path to finish", finished, timeout=180)
    log = node.kubectl("logs", "-n", namespace, "by-path")
    assert (phase, "CUDA_ERROR_OUT_OF_MEMORY" in log) == ("Failed", True), log


def test_the_gpu_node_takes_gpu_pods_only(namespace: str) -> None:
    """vgpu_gpu_node_taint: the node carries <prefix>/gpu-memory:NoSchedule; a pod without units (and
    without the toleration) stays Pending on it, and a GPU pod was given the toleration by the API
    server (ExtendedResourceToleration for units, the stack's admission policy for claims)."""
    taints = node.get("node", node.NODE)["spec"].get("taints") or []
    assert {"key": node.RESOURCE, "effect": "NoSchedule"} in [{k: t[k] for k in ("key", "effect")} for t in taints], (
        taints
    )
    node.apply(namespace, node.app_pod("plain", SLEEP))
    *claims, gpu = node.quota_pod("gpu", 1000, SLEEP)
    node.apply(namespace, *claims, gpu)
    running(namespace, "gpu")
    tolerations = node.get("pod", "gpu", namespace)["spec"]["tolerations"]
    assert any(t.get("key") == node.RESOURCE and t.get("operator") == "Exists" for t in tolerations), tolerations

    def untolerated() -> str | None:
        # kube-scheduler 1.36 does not name the taint: "node(s) had untolerated taint(s)".
        conditions = node.get("pod", "plain", namespace)["status"].get("conditions") or []
        message = next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")
        return message if "untolerated taint" in message else None

    message = node.wait_for("plain's PodScheduled reason: an untolerated taint", untolerated, timeout=120)
    assert node.get("pod", "plain", namespace)["status"]["phase"] == "Pending", message


def test_the_components_that_read_nvml_still_run() -> None:
    """The device plugin or DRA driver and cgpu-monitor get their GPUs by the same rule (the device
    list mount, a hostPath allowed in kube-system): the monitor's /metrics has both fake GPUs."""
    agent = "vgpu-dra-driver" if node.SCHEDULING == "dra" else "nvidia-shared-device-plugin"

    def components_running() -> bool:
        return all(
            any(node.running(p) for p in node.pods("kube-system", f"app.kubernetes.io/name={name}"))
            for name in (agent, "cgpu-monitor")
        )

    node.wait_for(f"{agent} and cgpu-monitor Running", components_running, timeout=300)
    monitor = node.pods("kube-system", "app.kubernetes.io/name=cgpu-monitor")[0]["metadata"]["name"]
    read = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9395/metrics').read().decode())"

    def gpus() -> set[str] | None:
        metrics = node.kubectl("exec", "-n", "kube-system", monitor, "--", "python3", "-c", read)
        found = {
            line.split('UUID="', 1)[1].split('"', 1)[0]
            for line in metrics.splitlines()
            if line.startswith("vgpu_gpu_memory_total_bytes{")
        }
        return found if len(found) == node.GPU_COUNT else None

    assert len(node.wait_for("cgpu-monitor's /metrics with both GPUs", gpus, timeout=120)) == node.GPU_COUNT


def test_the_roles_tenant_pod_policy_refuses_the_one_remaining_way_in(namespace: str) -> None:
    """The runtime trusts a device-list mount only when its source is /dev/null, which a pod can
    make only with a hostPath volume: the role's admission policy vgpu-tenant-pods refuses such a
    pod in a tenant namespace, with no label or setting of the operator (issue 40 item 4; before, the
    operator had to enforce PodSecurity baseline on every workload namespace)."""
    pod = node.app_pod("forged", SLEEP)
    pod["spec"]["tolerations"] = TOLERATE
    pod["spec"]["volumes"] = [{"name": "forged", "hostPath": {"path": "/dev/null", "type": "CharDevice"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "forged", "mountPath": "/var/run/nvidia-container-devices/all", "readOnly": True}
    ]
    with pytest.raises(subprocess.CalledProcessError) as refused:
        node.apply(namespace, pod)
    assert "vgpu-tenant-pods refuses pod forged" in refused.value.stderr, refused.value.stderr
    assert "hostPath volume(s) forged (/dev/null)" in refused.value.stderr, refused.value.stderr
