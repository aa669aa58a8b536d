"""Test doubles and peers shared by the component tests, tests/security, tests/k8s and the GPU smoke
test (imported as `fakes`; the conftests set the path). No pytest here: the GPU host runs it without."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import grpc
import pynvml
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families
from vgpu_components import config, monitor_collector, nvml, protos
from vgpu_components.extender_http import ExtenderServer
from vgpu_components.extender_verbs import Extender
from vgpu_components.kube import Gone
from vgpu_components.mps_supervisor import MpsManager
from vgpu_components.nvml import Gpu, Memory, ProcessMemory, XidEvent
from vgpu_components.plugin import DevicePlugin
from vgpu_components.podresources import PodResourcesClient
from vgpu_components.scheduling import ClusterModel

from tests.polling import wait_for

GIB = 1024


class FakeGpus:
    """A stand-in for NVML: the CI machine has no GPU (the H200 smoke script runs the real one)."""

    def __init__(self, gpus: list[Gpu]) -> None:
        self._gpus = gpus
        self.used_mib: dict[str, int] = {g.uuid: 0 for g in gpus}
        self.modes: dict[str, int] = {g.uuid: 0 for g in gpus}
        self.xids: list[XidEvent] = []
        self.xid_ready = threading.Event()
        self.process_mib: dict[str, dict[int, int]] = {g.uuid: {} for g in gpus}  # uuid -> pid -> MiB
        self.cuda_version = 13000  # what the driver supports: 13.0 (R580); R470 is 11040

    def gpus(self) -> list[Gpu]:
        return list(self._gpus)

    def memory(self, uuid: str) -> Memory:
        gpu = next(g for g in self._gpus if g.uuid == uuid)
        return Memory(total_mib=gpu.total_mib, used_mib=self.used_mib[uuid])

    def processes(self, uuid: str) -> list[ProcessMemory]:
        return [ProcessMemory(pid, mib * 1024 * 1024) for pid, mib in sorted(self.process_mib[uuid].items())]

    def inject_xid(self, uuid: str, xid: int) -> None:
        self.xids.append(XidEvent(uuid, xid))
        self.xid_ready.set()

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        self.xid_ready.wait(min(timeout_ms, 50) / 1000)
        self.xid_ready.clear()
        out, self.xids = self.xids, []
        return out

    def compute_mode(self, uuid: str) -> int:
        return self.modes[uuid]

    def set_compute_mode(self, uuid: str, mode: int) -> None:
        self.modes[uuid] = mode

    def cuda_driver_version(self) -> int:
        return self.cuda_version

    def close(self) -> None:
        pass


class StandInNvml:
    """pynvml as nvml.NvmlBackend calls it, over made-up GPUs: no NVIDIA library runs here (the H200
    checks run the real one). `processes[uuid][kind]` is what the per-process query of that kind
    (compute, mps, graphics) answers, pid -> MiB; `used_mib[uuid]` the device's used memory."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    KINDS: ClassVar[dict[str, str]] = {"Compute": "compute", "MPSCompute": "mps", "Graphics": "graphics"}

    def __init__(self, gpus: list[Gpu]) -> None:
        self._gpus = gpus
        self.processes: dict[str, dict[str, dict[int, int]]] = {
            g.uuid: {k: {} for k in self.KINDS.values()} for g in gpus
        }
        self.used_mib: dict[str, int] = {g.uuid: 0 for g in gpus}

    def nvmlDeviceGetMemoryInfo(self, handle: Gpu, version: int | None = None) -> SimpleNamespace:
        used = self.used_mib[handle.uuid] * 1024 * 1024
        total = handle.total_mib * 1024 * 1024
        return SimpleNamespace(total=total, used=used, free=total - used, reserved=0)

    def nvmlDeviceGetIndex(self, handle: Gpu) -> int:
        return handle.index

    def nvmlDeviceGetName(self, handle: Gpu) -> str:
        return handle.name

    def __getattr__(self, name: str) -> Any:
        kind = name.removeprefix("nvmlDeviceGet").removesuffix("RunningProcesses_v3")
        if kind not in self.KINDS:
            raise AttributeError(name)

        def query(handle: Gpu) -> list[SimpleNamespace]:
            listed = self.processes[handle.uuid][self.KINDS[kind]]
            return [SimpleNamespace(pid=pid, usedGpuMemory=mib * 1024 * 1024) for pid, mib in listed.items()]

        return query


def nvml_backend(stand_in: StandInNvml, gpus: list[Gpu]) -> nvml.NvmlBackend:
    """The real NvmlBackend over the stand-in library (its own set-up calls nvmlInit)."""
    backend = nvml.NvmlBackend.__new__(nvml.NvmlBackend)
    backend.nvml = stand_in
    backend._handles = {g.uuid: g for g in gpus}  # pylint: disable=protected-access
    backend._lock = threading.Lock()  # pylint: disable=protected-access
    backend._events = None  # pylint: disable=protected-access
    return backend


FAKE_CONTROL = textwrap.dedent(
    """\
    import json, os, socket, sys
    SERVER_COMMANDS = (
        "get_active_thread_percentage", "set_active_thread_percentage", "get_device_pinned_mem_limit",
        "set_device_pinned_mem_limit", "exact_device_pinned_mem_limit", "shutdown_server",
    )
    pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    path = os.path.join(pipe, "control")
    def shown(value):  # driver 580 answers a limit in whole units of its largest one, truncated: 3000M is "2G"
        mib = float(value[:-1]) * {"K": 1 / 1024, "M": 1, "G": 1024}[value[-1].upper()]
        return f"{int(mib // 1024)}G" if mib >= 1024 else f"{int(mib)}M"
    if sys.argv[1:] == ["-f"]:
        logs = os.environ["CUDA_MPS_LOG_DIRECTORY"]
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "control.log"), "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\\n")
        percentage, pinned = 100.0, {}
        servers, next_pid = {}, 40000  # server pid -> its own percentage and pinned limits
        server = socket.socket(socket.AF_UNIX)
        if os.path.exists(path):
            os.unlink(path)
        server.bind(path)
        server.listen(8)
        while True:
            conn, _ = server.accept()
            with conn, conn.makefile("rw") as stream:
                words = stream.readline().split()
                command, args = (words[0], words[1:]) if words else ("", [])
                if command == "get_default_active_thread_percentage" and not args:
                    reply = f"{percentage:.1f}"
                elif command == "set_default_active_thread_percentage" and len(args) == 1:
                    percentage = float(args[0])
                    reply = f"{percentage:.1f}"
                elif command == "set_default_device_pinned_mem_limit" and len(args) == 2:
                    pinned[args[0]] = args[1]
                    reply = ""
                elif command == "get_default_device_pinned_mem_limit" and len(args) == 1:
                    reply = shown(pinned.get(args[0], "0M"))
                elif command == "exact_default_device_pinned_mem_limit" and len(args) == 1:  # the tests' own
                    reply = pinned.get(args[0], "0M")
                elif command == "start_server":  # what a client's first connection makes the daemon do
                    next_pid += 1
                    servers[next_pid] = {"percentage": percentage, "pinned": dict(pinned)}
                    reply = str(next_pid)
                elif command == "get_server_list" and not args:
                    reply = "\\n".join(str(pid) for pid in servers)
                elif command in SERVER_COMMANDS and args and args[0].isdigit() and int(args[0]) not in servers:
                    reply = f"Invalid PID {args[0]}"
                elif command == "get_active_thread_percentage" and len(args) == 1:
                    reply = f"{servers[int(args[0])]['percentage']:.1f}"
                elif command == "set_active_thread_percentage" and len(args) == 2:
                    servers[int(args[0])]["percentage"] = float(args[1])
                    reply = f"{float(args[1]):.1f}"
                elif command == "get_device_pinned_mem_limit" and len(args) == 2:
                    reply = shown(servers[int(args[0])]["pinned"].get(args[1], "0M"))
                elif command == "exact_device_pinned_mem_limit" and len(args) == 2:  # the tests' own
                    reply = servers[int(args[0])]["pinned"].get(args[1], "0M")
                elif command == "set_device_pinned_mem_limit" and len(args) == 3:
                    servers[int(args[0])]["pinned"][args[1]] = args[2]
                    reply = ""
                elif command == "shutdown_server" and args:
                    del servers[int(args[0])]
                    reply = ""
                elif command == "quit":
                    stream.write("\\n")
                    break
                else:
                    reply = f"Invalid command {command}"
                stream.write(reply + "\\n")
        os.unlink(path)
        sys.exit(0)
    replies = []
    for line in sys.stdin.read().splitlines():
        client = socket.socket(socket.AF_UNIX)
        try:
            client.connect(path)
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            sys.exit(1)
        with client, client.makefile("rw") as stream:
            stream.write(line + "\\n")
            stream.flush()
            replies.append(stream.read().strip())  # the daemon closes the connection after its answer
    print("\\n".join(replies))
    sys.exit(1 if any(r.startswith("Invalid") for r in replies) else 0)
    """
)


def fake_mps_control(folder: Path) -> str:
    """A stand-in nvidia-cuda-mps-control in `folder` (no MPS binaries on the CI machine): `-f` is a
    control daemon listening on <CUDA_MPS_PIPE_DIRECTORY>/control, a real Unix socket, that answers
    the control protocol's text commands (the defaults, and each server's own share and pinned
    limit, get_server_list and shutdown_server; `start_server` stands for what a client's first
    connection makes the real daemon do); without arguments it sends the lines on stdin there and
    prints the answers (test_mps.py says what it keeps of the real tool). It answers a pinned limit
    as driver 580's daemon does on the H200, in whole units of the largest unit, truncated (3000M is
    "2G"); the tests read the exact value set with its own exact_[default_]device_pinned_mem_limit."""
    script = folder / "fake_mps_control.py"
    script.write_text(FAKE_CONTROL)
    wrapper = folder / "nvidia-cuda-mps-control"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def mps_ask(pipe: Path, command: str) -> str:
    """One control command to a (stand-in) MPS control daemon's socket, as its client sends it."""
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(pipe / "control"))
        with client.makefile("rw") as stream:
            stream.write(command + "\n")
            stream.flush()
            return stream.read().strip()  # the daemon closes the connection after its answer


def two_gpus() -> list[Gpu]:
    return [
        Gpu(uuid="GPU-11111111-2222-3333-4444-555555555555", index=0, total_mib=12 * GIB, name="Fake 12G"),
        Gpu(uuid="GPU-66666666-7777-8888-9999-000000000000", index=1, total_mib=12 * GIB, name="Fake 12G"),
    ]


class FakeKubelet:
    """A real gRPC peer playing kubelet's side of the device plugin API.

    It serves v1beta1.Registration on <dir>/kubelet.sock; on Register it dials the plugin's
    socket, reads its options and follows the ListAndWatch stream like kubelet's device manager.
    `stub`, `options` and `updates` are those of the first resource registered (gpu-memory);
    `stubs` and `streams` hold every resource's, by resource name.
    """

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.msgs, self.services = protos.deviceplugin()
        self.registrations: list[Any] = []
        self.registered = threading.Event()
        self.updates: list[list[tuple[str, str]]] = []
        self.options: Any = None
        self.server: grpc.Server | None = None
        self.channel: grpc.Channel | None = None
        self.stub: Any = None
        self.stubs: dict[str, Any] = {}
        self.streams: dict[str, list[list[tuple[str, str]]]] = {}
        self.channels: list[grpc.Channel] = []

    def start(self) -> FakeKubelet:
        kubelet = self

        class Registration:
            def Register(self, request: Any, context: Any) -> Any:
                kubelet.registrations.append(request)
                first = request.resource_name == kubelet.registrations[0].resource_name
                args = (request.endpoint, request.resource_name, first)
                threading.Thread(target=kubelet._follow, args=args, daemon=True).start()
                return kubelet.msgs.Empty()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.services.add_RegistrationServicer_to_server(Registration(), server)
        server.add_insecure_port(f"unix://{self.plugin_dir / 'kubelet.sock'}")
        server.start()
        self.server = server
        return self

    def _follow(self, endpoint: str, resource: str, first: bool) -> None:
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}")
        self.channels.append(channel)
        stub = self.services.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(self.msgs.Empty(), timeout=5)
        stream = self.streams[resource] = []
        self.stubs[resource] = stub
        if first:
            self.channel, self.stub, self.options = channel, stub, options
        self.registered.set()
        try:
            for response in stub.ListAndWatch(self.msgs.Empty()):
                devices = [(d.ID, d.health) for d in response.devices]
                stream.append(devices)
                if first:
                    self.updates.append(devices)
        except grpc.RpcError:
            pass  # the stream ends when the plugin or this fake goes away

    def wait_update(self, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        """Block until at least `count` ListAndWatch messages arrived; return the latest."""
        wait_for(
            f"{count} ListAndWatch updates",
            lambda: len(self.updates) >= count,
            timeout,
            0.01,
            seen=lambda: f"{len(self.updates)} updates",
        )
        return self.updates[-1]

    def wait_stream(self, resource: str, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        """Block until `resource` got at least `count` ListAndWatch messages; return the latest."""
        wait_for(
            f"{count} ListAndWatch updates of {resource}",
            lambda: len(self.streams.get(resource, ())) >= count,
            timeout,
            0.01,
            seen=lambda: f"{len(self.streams.get(resource, ()))} updates",
        )
        return self.streams[resource][-1]

    def stop(self) -> None:
        for channel in self.channels:
            channel.close()
        if self.server is not None:
            self.server.stop(grace=0).wait(2)
        (self.plugin_dir / "kubelet.sock").unlink(missing_ok=True)


class FakePodResources:
    """A real gRPC server speaking kubelet's PodResources API v1 on a unix socket.

    `holders` is the list of (namespace, pod, container, resource, device IDs) it reports;
    `claims` the DRA devices, as (namespace, pod, container, driver, device name, CDI device names).
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.msgs, self.services = protos.podresources()
        self.holders: list[tuple[str, str, str, str, list[str]]] = []
        self.claims: list[tuple[str, str, str, str, str, list[str]]] = []
        self.calls = 0
        self.server: grpc.Server | None = None

    def start(self) -> FakePodResources:
        fake = self

        class Lister:
            def List(self, request: Any, context: Any) -> Any:
                fake.calls += 1
                pods: dict[tuple[str, str], Any] = {}
                containers: dict[tuple[str, str, str], Any] = {}

                def container_of(namespace: str, pod: str, container: str) -> Any:
                    entry = pods.setdefault((namespace, pod), fake.msgs.PodResources(name=pod, namespace=namespace))
                    if (namespace, pod, container) not in containers:
                        entry.containers.append(fake.msgs.ContainerResources(name=container))
                        containers[namespace, pod, container] = entry.containers[-1]
                    return containers[namespace, pod, container]

                for namespace, pod, container, resource, devices in fake.holders:
                    container_of(namespace, pod, container).devices.append(
                        fake.msgs.ContainerDevices(resource_name=resource, device_ids=devices)
                    )
                for namespace, pod, container, driver, device, cdi_names in fake.claims:
                    resource = fake.msgs.ClaimResource(
                        driver_name=driver,
                        pool_name="node-a",
                        device_name=device,
                        cdi_devices=[fake.msgs.CDIDevice(name=n) for n in cdi_names],
                    )
                    container_of(namespace, pod, container).dynamic_resources.append(
                        fake.msgs.DynamicResource(
                            claim_name=f"{pod}-gpu", claim_namespace=namespace, claim_resources=[resource]
                        )
                    )
                return fake.msgs.ListPodResourcesResponse(pod_resources=list(pods.values()))

            def GetAllocatableResources(self, request: Any, context: Any) -> Any:
                return fake.msgs.AllocatableResourcesResponse()

            def Get(self, request: Any, context: Any) -> Any:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "not used")

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.services.add_PodResourcesListerServicer_to_server(Lister(), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self.server = server
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0).wait(2)


class RecordingNodeApi:
    """Records node annotations and events instead of calling the API server.

    The unit tests have no kube-apiserver; tests/k8s runs the components against a real one.
    """

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.annotations: list[tuple[str, dict[str, str]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.labels = dict(labels or {})
        self.changed = threading.Event()

    def node_labels(self, node: str) -> dict[str, str]:
        return dict(self.labels)

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None:
        self.annotations.append((node, annotations))
        self.changed.set()

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
        self.events.append((node, reason, message))
        self.changed.set()


def node_obj(
    name: str, gpus: list[tuple[str, int, int]] | None, unit: int = 100, cores: list[tuple[int, int]] | None = None
) -> dict[str, Any]:
    """A Node as the API returns it; gpus are (uuid, total MiB, used units) for the annotation, and
    on a node with compute shares `cores` gives each GPU's (cores, used cores)."""
    annotations = {}
    if gpus is not None:
        entries: list[dict[str, Any]] = [
            {
                "uuid": u,
                "index": i,
                "key": "k",
                "total_mib": t,
                "units": t // unit,
                "used_units": used,
                "healthy": True,
            }
            for i, (u, t, used) in enumerate(gpus)
        ]
        for gpu, (total, taken) in zip(entries, cores or []):
            gpu.update(cores=total, used_cores=taken)
        annotations["vgpu.io/gpus"] = json.dumps({"unit_mib": unit, "gpus": entries})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def pod_obj(
    name: str, mib: int | None, uid: str | None = None, cores: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A pending Pod as kube-scheduler serializes it into ExtenderArgs.Pod (`cores`: its compute
    share in percent)."""
    resources: dict[str, Any] = {}
    if mib is not None:
        resources = {
            "limits": {"vgpu.io/gpu-memory": str(mib // 100)},
            "requests": {"vgpu.io/gpu-memory": str(mib // 100)},
        }
    if cores is not None:
        for part in ("limits", "requests"):
            resources.setdefault(part, {})["vgpu.io/gpu-cores"] = str(cores)
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "annotations": {}},
        "spec": {
            "containers": [{"name": "main", "image": "cuda:11.4", "resources": resources}],
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending"},
    }
    pod.update(extra)
    return pod


GPUS = two_gpus()


class Exporter:
    def __init__(self, root: Path, gpus: list[Gpu] | None = None) -> None:
        self.cfg = config.load(None, environ={})
        self.cfg["state_dir"] = str(root / "state")
        self.pod_resources = FakePodResources(root / "pr.sock").start()
        self.backend = FakeGpus(gpus or GPUS)
        self.collector = monitor_collector.MonitorCollector(
            self.cfg, "node-a", self.backend, PodResourcesClient(str(root / "pr.sock"))
        )
        self.server = monitor_collector.serve(self.collector, 0, "127.0.0.1").start()
        self.port = self.server.server_address[1]

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            text = response.read().decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
        return out

    def stop(self) -> None:
        self.server.stop()
        self.pod_resources.stop()


def write_quota(state_dir: str, alloc_id: str, memory_limit: str) -> None:
    """An allocation's quota file as the device plugin or the DRA driver writes it (its memory_limit)."""
    path = Path(state_dir) / "quotas" / f"{alloc_id}.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# vgpu quota for allocation {alloc_id}\nmemory_limit={memory_limit}\ngpu_virtual_memory=1\n")


def value(metrics: dict[str, Any], name: str, **labels: str) -> float:
    matches = [v for lab, v in metrics[name] if all(lab.get(k) == want for k, want in labels.items())]
    assert len(matches) == 1, f"{name}{labels}: {metrics.get(name)}"
    return float(matches[0])


def make_config(root: Path, **plugin: Any) -> dict[str, Any]:
    cfg = config.load(None, environ={})
    cfg["state_dir"] = str(root / "state")
    cfg["device_plugin"]["kubelet_dir"] = str(root / "dp")
    cfg["device_plugin"]["pod_resources_socket"] = str(root / "pr.sock")
    cfg["device_plugin"].update(plugin)
    return cfg


class PluginNode:
    """A device plugin and its kubelet, started in a temp folder; with MPS on (mps_enabled) also
    nvidia-mps's manager with the stand-in control daemon (fake_mps_control), unless nvidia_mps
    is False."""

    def __init__(
        self,
        root: Path,
        gpus: list[Gpu] | None = None,
        *,
        mps_dir: Path | None = None,
        cuda_version: int = 13000,
        nvidia_mps: bool = True,
        **plugin: Any,
    ) -> None:
        self.root = root
        self.cfg = make_config(root, **plugin)
        mps_dir = mps_dir or root / "mps"  # MPS's pipe folders, instead of /run/nvidia/mps
        self.cfg["mps"].update(pipe_dir=str(mps_dir), log_dir=str(mps_dir / "log"), probe_interval_s=0.2)
        (root / "dp").mkdir(parents=True, exist_ok=True)
        self.mps: MpsManager | None = None
        if self.cfg["device_plugin"]["mps_enabled"] and nvidia_mps:
            self.cfg["mps"]["control_binary"] = fake_mps_control(root)
            self.mps = MpsManager(self.cfg)
            self.mps.start()
            threading.Thread(target=self.mps.run, daemon=True).start()
        self.backend = FakeGpus(gpus or two_gpus())
        self.backend.cuda_version = cuda_version
        self.api = RecordingNodeApi()
        self.pod_resources = FakePodResources(root / "pr.sock").start()
        self.kubelet = FakeKubelet(root / "dp").start()
        self.plugin = DevicePlugin(
            self.cfg,
            self.backend.gpus(),
            "node-a",
            backend=self.backend,
            node_api=self.api,
            pod_resources=PodResourcesClient(str(root / "pr.sock")),
        )
        self.plugin.start()
        assert self.kubelet.registered.wait(5), "the plugin never registered with kubelet"

    def stop(self) -> None:
        self.plugin.stop()
        self.kubelet.stop()
        self.pod_resources.stop()
        if self.mps is not None:
            self.mps.stop()


def allocate(node: PluginNode, device_ids: list[str], resource: str = "") -> Any:
    """kubelet's Allocate of one container's device IDs (of gpu-memory, or of `resource`)."""
    msgs = node.kubelet.msgs
    request = msgs.AllocateRequest(container_requests=[msgs.ContainerAllocateRequest(devices_ids=device_ids)])
    stub = node.kubelet.stubs[resource] if resource else node.kubelet.stub
    return stub.Allocate(request, timeout=5)


GPU0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPU1 = "GPU-bbbbbbbb-1111-1111-1111-111111111111"


class FakeClusterApi:
    """Plays the API server for the extender: records what it writes and serves a scripted list +
    watch (the unit tests have no kube-apiserver; tests/k8s runs the extender against a real one)."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {"nodes": [], "pods": []}
        self.events: dict[str, queue.Queue[tuple[str, dict[str, Any]] | None]] = {
            "nodes": queue.Queue(),
            "pods": queue.Queue(),
        }
        self.lists: dict[str, int] = {"nodes": 0, "pods": 0}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.annotations: list[tuple[str, str, dict[str, str]]] = []  # from bindings
        self.bindings: list[tuple[str, str, str, str]] = []
        self.bound: dict[str, str] = {}  # pod uid -> node
        self.fail_bind = False
        self.node_reads: list[str] = []  # nodes whose pods the extender read again before refusing
        self.fail_reads = False
        self.unlisted: set[str] = set()  # pod uids a read of a node's pods misses (a read behind)
        self.budgets: list[dict[str, Any]] = []  # PodDisruptionBudgets
        self.pod_events: list[tuple[str, str, str]] = []  # (namespace/name, reason, message)

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None:
        meta = pod["metadata"]
        self.pod_events.append((f"{meta['namespace']}/{meta['name']}", reason, message))

    def disruption_budgets(self) -> list[dict[str, Any]]:
        return list(self.budgets)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        self.node_reads.append(node)
        if self.fail_reads:
            raise ApiException(status=503, reason="the API server is unavailable")
        return [
            p
            for p in self.pods.values()
            if (p.get("spec") or {}).get("nodeName") == node and p["metadata"]["uid"] not in self.unlisted
        ]

    def list(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        self.lists[kind] += 1
        return list(self.objects[kind]), str(self.lists[kind])

    def watch(self, kind: str, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        while True:
            item = self.events[kind].get()
            if item is None:
                raise Gone("too old resource version")
            yield item

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[(namespace, name)]

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        if self.fail_bind:
            raise RuntimeError('pods "x" is forbidden')
        if uid in self.bound:  # as kube-apiserver answers a second binding of one pod
            raise ApiException(status=409, reason=f'pod {name} is already assigned to node "{self.bound[uid]}"')
        self.bound[uid] = node
        self.bindings.append((namespace, name, uid, node))
        # The API server puts a Binding's annotations on the pod.
        self.annotations.append((namespace, name, annotations))


class Scheduler:
    """Plays kube-scheduler: POSTs to the extender and applies binds back through the watch."""

    def __init__(self, port: int, api: FakeClusterApi, extender: Extender, packing: str = "tightest") -> None:
        self.port = port
        self.api = api
        self.extender = extender
        self.packing = packing  # the scheduler configuration: see roles/vgpu_stack

    def post(self, path: str, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        data = raw if raw is not None else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        conn.close()
        return response.status, json.loads(payload)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()

    def schedule(self, pod: dict[str, Any], nodes: list[str]) -> tuple[str, dict[str, str]]:
        """Like kube-scheduler: filter-tightest -> bind ("tightest" packing) or filter ->
        prioritize -> bind ("weighted"); among equals the first node. Returns (node, annotations)."""
        self.api.pods[("default", pod["metadata"]["name"])] = pod
        self.extender.model.set_pod(pod)  # the watch sees the new pending pod
        args = {"Pod": pod, "Nodes": None, "NodeNames": nodes}
        verb = "filter-tightest" if self.packing == "tightest" else "filter"
        status, result = self.post(f"/gpushare-scheduler/{verb}", args)
        assert status == 200, result
        assert result["Error"] == ""
        feasible = result["NodeNames"]
        assert feasible, f"no node fits: {result['FailedNodes']} {result['FailedAndUnresolvableNodes']}"
        best = feasible[0]
        if self.packing == "weighted":
            status, scores = self.post("/gpushare-scheduler/prioritize", {**args, "NodeNames": feasible})
            assert status == 200
            best = max(scores, key=lambda s: s["Score"])["Host"]
        bind = {
            "PodName": pod["metadata"]["name"],
            "PodNamespace": "default",
            "PodUID": pod["metadata"]["uid"],
            "Node": best,
        }
        status, result = self.post("/gpushare-scheduler/bind", bind)
        assert status == 200 and result == {"Error": ""}, result
        annotations = self.api.annotations[-1][2]
        bound = json.loads(json.dumps(pod))
        bound["spec"]["nodeName"] = best
        bound["metadata"]["annotations"].update(annotations)
        self.api.pods[("default", pod["metadata"]["name"])] = bound
        self.extender.model.set_pod(bound)  # the watch sees the bound pod
        return best, annotations


@contextlib.contextmanager
def extender_cluster(packing: str = "tightest", **server: Any) -> Iterator[Scheduler]:
    """The extender serving on 127.0.0.1 (a free port) with FakeClusterApi, node gpu-a (2 x 12 GiB)
    and node cpu-b (no GPU); `server` goes to ExtenderServer."""
    api = FakeClusterApi()
    model = ClusterModel("vgpu.io")
    model.set_node(node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)]))
    model.set_node(node_obj("cpu-b", None))
    extender = Extender(model, api)
    http = ExtenderServer("127.0.0.1", 0, extender, **server)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield Scheduler(http.server_address[1], api, extender, packing)
    finally:
        http.shutdown()
        http.server_close()


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "resourceVersion": "7"}}


class RecordingApiServer(ThreadingHTTPServer):
    """Plays kube-apiserver for the API adapters: records each request, answers like it."""

    daemon_threads = True
    # socketserver's default listen backlog is 5: a burst of 16 connections on a loaded machine
    # overflowed it and some were reset (a client test then saw connections that kube-apiserver,
    # listening with the system's somaxconn, would not make it open).
    request_queue_size = 128

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.clients: set[tuple[str, int]] = set()  # client addresses: one per TCP connection
        self.watch_lines: list[dict[str, Any]] = []
        self.watch_delay_s = 0.0  # how long a watch stays open before it ends
        self.nodes: list[dict[str, Any]] = [NODE]
        self.pods: list[dict[str, Any]] = []  # the pods' list
        # With pod_events, a watch of pods streams what is put there (a None ends it), as
        # kube-apiserver streams a watch; without, it answers watch_lines at once as any watch.
        self.pod_events: queue.Queue[dict[str, Any] | None] | None = None
        self.binding_status = 201  # what a Binding is answered with (409: the pod is bound already)
        self.binding_delay_s = 0.0  # how long a Binding's answer takes (kube-apiserver's write to etcd)
        super().__init__(("127.0.0.1", 0), _ApiHandler)


def kubeconfig_of(server: RecordingApiServer, path: Path, user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig at `path` that points a Kubernetes client at the recording API server."""
    api = f"http://127.0.0.1:{server.server_address[1]}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": api}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(doc))
    return path


class _ApiHandler(BaseHTTPRequestHandler):
    server: RecordingApiServer
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver

    def _reply(self, status: int, body: Any, lines: list[dict[str, Any]] | None = None) -> None:
        data = (
            b"".join(json.dumps(x).encode() + b"\n" for x in lines) if lines is not None else json.dumps(body).encode()
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((self.command, self.path, self.headers.get("Content-Type", ""), body))
        self.server.clients.add(self.client_address)
        return body

    def _stream(self, events: queue.Queue[dict[str, Any] | None]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while (event := events.get()) is not None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        self._record()
        if "watch=true" in self.path and self.path.startswith("/api/v1/pods") and self.server.pod_events:
            self._stream(self.server.pod_events)
        elif "watch=true" in self.path:
            time.sleep(self.server.watch_delay_s)
            self._reply(200, None, lines=self.server.watch_lines)
        elif self.path.startswith("/api/v1/nodes"):
            nodes = self.server.nodes
            self._reply(
                200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": nodes}
            )
        elif self.path.startswith("/api/v1/pods"):
            pods = self.server.pods
            self._reply(
                200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": pods}
            )
        else:
            self._reply(
                200,
                {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": []},
                },
            )

    def do_PATCH(self) -> None:
        self._record()
        self._reply(200, {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}})

    def do_POST(self) -> None:
        body = self._record()
        if self.path.endswith("/binding"):
            time.sleep(self.server.binding_delay_s)
            code = self.server.binding_status
            self._reply(
                code,
                {"kind": "Status", "apiVersion": "v1", "status": "Success" if code < 300 else "Failure", "code": code},
            )
        else:
            self._reply(201, body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet test output."""


def make_pki(folder: Path) -> dict[str, Path]:
    """A throw-away PKI made with openssl: a CA, the extender's serving certificate for 127.0.0.1,
    a client certificate from that CA (kube-scheduler's), and a client certificate from another CA.
    Returns the paths by name: ca.crt, server.crt/.key, client.crt/.key, stranger.crt/.key."""
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    def key(name: str) -> None:
        run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")

    def ca(name: str) -> None:
        key(name)
        run("req", "-x509", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-days", "2", "-out", f"{name}.crt")

    def sign(name: str, issuer: str, subject: str, extensions: str) -> None:
        key(name)
        run("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        (folder / f"{name}.ext").write_text(extensions)
        run(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.crt", "-CAkey", f"{issuer}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        )  # fmt: skip

    ca("ca")
    ca("other-ca")
    server = "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n"
    sign("server", "ca", "/CN=gpushare-scheduler-extender", server)
    sign("client", "ca", "/CN=system:kube-scheduler", "extendedKeyUsage=clientAuth\n")
    sign("stranger", "other-ca", "/CN=system:kube-scheduler", "extendedKeyUsage=clientAuth\n")
    return {p.name: p for p in folder.iterdir()}


class RecordingPodApi:
    """Plays the API server for the monitor's enforcement: serves this node's pods, records Events
    and evictions (the unit tests have no kube-apiserver; tests/k8s uses the real one)."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.pods = pods or []
        self.events: list[tuple[str, str, str]] = []  # (pod name, reason, message)
        self.node_events: list[tuple[str, str, str]] = []  # (node, reason, message)
        self.evictions: list[tuple[str, str]] = []
        self.deletes: list[tuple[str, str, int | None]] = []  # (namespace, pod, grace period asked; None: its own)
        self.refuse_evictions = False

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName") == node]

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None:
        self.events.append((pod["metadata"]["name"], reason, message))

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
        self.node_events.append((node, reason, message))

    def evict(self, namespace: str, name: str, uid: str, grace_seconds: int | None = None) -> None:
        if self.refuse_evictions:  # as kube-apiserver answers a delete the admission policy denies
            raise ApiException(status=403, reason=f"cgpu-monitor may evict only pods on its own node: {uid}")
        self.evictions.append((namespace, name))
        self.deletes.append((namespace, name, grace_seconds))


def gpu_pod(
    name: str,
    units: int,
    *,
    node: str = "node-a",
    container_id: str = "",
    namespace: str = "team",
    container: str = "main",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod whose container (`main`) holds `units` of vgpu.io/gpu-memory; its container
    status carries `container_id` (containerd) when given."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}.{name}"))
    limits = {"vgpu.io/gpu-memory": str(units)} if units else {}
    status: dict[str, Any] = {"phase": "Running", "containerStatuses": []}
    if container_id:
        status["containerStatuses"] = [{"name": container, "containerID": f"containerd://{container_id}"}]
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": dict(labels or {})},
        "spec": {"nodeName": node, "containers": [{"name": container, "resources": {"limits": limits}}]},
        "status": status,
    }


def cgroup_path(pod: dict[str, Any], container_id: str) -> str:
    """The cgroup (v2, systemd driver) kubelet gives a container of that pod."""
    uid = pod["metadata"]["uid"].replace("-", "_")
    pod_slice = f"kubepods-burstable-pod{uid}.slice"
    return f"/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{container_id}.scope"


def host_process(proc: Path, pid: int, cgroup: str, command: str = "python3 train.py", pid_ns: str = "") -> None:
    """/proc/<pid>/{cgroup,cmdline} of a process in `cgroup`; with `pid_ns` its PID namespace link
    (as readlink shows it: pid:[inode])."""
    folder = proc / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cgroup").write_text(f"0::{cgroup}\n")
    (folder / "cmdline").write_bytes(command.replace(" ", "\0").encode() + b"\0")
    if pid_ns:
        (folder / "ns").mkdir(exist_ok=True)
        (folder / "ns" / "pid").unlink(missing_ok=True)
        (folder / "ns" / "pid").symlink_to(pid_ns)


def started(proc: Path, pid: int, start: int, holds: Sequence[str] = ()) -> None:
    """/proc/<pid>/stat with its start time (field 22, clock ticks after boot) and /proc/<pid>/fd
    with a descriptor of each device file in `holds` (names under /dev: nvidiactl, nvidia0,
    nvidia-uvm) and one of /dev/null, as the kernel shows them."""
    folder = proc / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", *["0"] * 12, str(start), "0", "0"]
    (folder / "stat").write_text(f"{pid} (python3) {' '.join(fields)}\n")
    fds = folder / "fd"
    fds.mkdir(exist_ok=True)
    for old in fds.iterdir():  # a PID started again holds only what its new process holds
        old.unlink()
    for fd, name in enumerate(["null", *holds]):
        (fds / str(fd)).symlink_to(f"/dev/{name}")


def cgroup_of(
    proc: Path, pid: int, pod: dict[str, Any], container_id: str, *, child: str = "", command: str = "python3 train.py"
) -> None:
    """/proc/<pid>/cgroup of a process in that pod's container (cgroup v2, systemd driver); `child`:
    a cgroup the process made below its container's and moved into (writable cgroupfs)."""
    host_process(proc, pid, cgroup_path(pod, container_id) + (f"/{child}" if child else ""), command)


class FakeDraKubelet:
    """A real gRPC peer playing kubelet's side of a DRA plugin: its plugin watcher and DRA manager.

    It looks for registration sockets in the registry folder as kubelet's plugin watcher does
    (kubelet is told by inotify; this fake polls), asks GetInfo, checks the plugin type and that
    "v1.DRAPlugin" is offered, dials the endpoint and reports the registration. prepare() and
    unprepare() then make kubelet's NodePrepareResources and NodeUnprepareResources calls.
    """

    def __init__(self, registry_dir: Path) -> None:
        self.registry_dir = registry_dir
        self.msgs, self.services = protos.dra()
        self.reg_msgs, self.reg_services = protos.pluginregistration()
        self.infos: list[Any] = []
        self.registered = threading.Event()
        self.stub: Any = None
        self._channels: list[grpc.Channel] = []
        self._seen: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> FakeDraKubelet:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            for path in sorted(self.registry_dir.glob("*.sock")) if self.registry_dir.is_dir() else []:
                try:
                    st = path.stat()
                    key = (str(path), st.st_ino, st.st_ctime_ns)  # a socket made again is new
                except FileNotFoundError:
                    continue
                if key not in self._seen:
                    self._seen.add(key)
                    self._register(path)

    def _register(self, path: Path) -> None:
        channel = grpc.insecure_channel(f"unix://{path}")
        self._channels.append(channel)
        registration = self.reg_services.RegistrationStub(channel)
        info = registration.GetInfo(self.reg_msgs.InfoRequest(), timeout=5)
        self.infos.append(info)
        ok = info.type == "DRAPlugin" and "v1.DRAPlugin" in info.supported_versions
        error = "" if ok else f"unsupported plugin {info.type} {list(info.supported_versions)}"
        if ok:
            service = grpc.insecure_channel(f"unix://{info.endpoint}")
            self._channels.append(service)
            self.stub = self.services.DRAPluginStub(service)
        registration.NotifyRegistrationStatus(
            self.reg_msgs.RegistrationStatus(plugin_registered=ok, error=error), timeout=5
        )
        if ok:
            self.registered.set()

    def _claims(self, claims: list[tuple[str, str, str]]) -> list[Any]:
        return [self.msgs.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        """NodePrepareResources for (namespace, uid, name) claims."""
        request = self.msgs.NodePrepareResourcesRequest(claims=self._claims(list(claims)))
        return self.stub.NodePrepareResources(request, timeout=10)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        request = self.msgs.NodeUnprepareResourcesRequest(claims=self._claims(list(claims)))
        return self.stub.NodeUnprepareResources(request, timeout=10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for channel in self._channels:
            channel.close()


class FakeDraApi:
    """The DRA driver's API calls on in-memory objects (the real API server runs in tests/k8s)."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self._version = 0

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get_claim", f"{namespace}/{name}"))
        if (namespace, name) not in self.claims:
            raise ApiException(status=404, reason="Not Found")
        return json.loads(json.dumps(self.claims[(namespace, name)]))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get_pod", f"{namespace}/{name}"))
        if (namespace, name) not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return json.loads(json.dumps(self.pods[(namespace, name)]))

    def node_uid(self, node: str) -> str:
        return f"uid-of-{node}"

    def list_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        self.calls.append(("list_slices", node))
        found = [s for s in self.slices.values() if s["spec"]["nodeName"] == node and s["spec"]["driver"] == driver]
        return json.loads(json.dumps(found))

    def create_slice(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        self.calls.append(("create_slice", name))
        if name in self.slices:
            raise ApiException(status=409, reason="AlreadyExists")
        self._version += 1
        self.slices[name] = json.loads(json.dumps(body))
        self.slices[name]["metadata"]["resourceVersion"] = str(self._version)

    def replace_slice(self, name: str, body: dict[str, Any]) -> None:
        self.calls.append(("replace_slice", name))
        if body["metadata"].get("resourceVersion") != self.slices[name]["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self._version += 1
        self.slices[name] = json.loads(json.dumps(body))
        self.slices[name]["metadata"]["resourceVersion"] = str(self._version)

    def delete_slice(self, name: str) -> None:
        self.calls.append(("delete_slice", name))
        self.slices.pop(name, None)


def allocated_claim(
    name: str,
    uid: str,
    node: str,
    results: list[tuple[str, str, str | None]],
    *,
    namespace: str = "ns",
    reserved_for: Sequence[tuple[str, str]] = (),
    driver: str = "gpu.vgpu.io",
) -> dict[str, Any]:
    """A ResourceClaim as kube-scheduler leaves it: results (request, device, consumed memory or
    None) on `node`'s pool of `driver`, reserved for (pod name, pod uid)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {
            "devices": {"requests": [{"name": result[0], "exactly": {"deviceClassName": driver}} for result in results]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": driver,
                            "pool": node,
                            "device": device,
                            **({"consumedCapacity": {"memory": mem}, "shareID": str(uuid.uuid4())} if mem else {}),
                        }
                        for request, device, mem in results
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": u} for p, u in reserved_for],
        },
    }
