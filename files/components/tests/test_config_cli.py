"""The shared config file with VGPU_* overrides (config.py, config_values.py), and the dashboard's
metrics (the entry points' command lines: test_component.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from vgpu_components import config, monitor_collector

SRC = Path(config.__file__).resolve().parents[1]

FULL = """\
resource_prefix: example.com
unit_mib: 50
reserved_mib: 256
install_prefix: /opt/vgpu
state_dir: /var/lib/vgpu
log_format: text
device_plugin:
  kubelet_dir: /var/lib/kubelet/device-plugins
  pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock
  healthz_port: 9396
  mps_enabled: true
  mps_active_thread_percentage: 40
  switches: {gpu_virtual_memory: 1, limit: 1, gpu_cgroup_enable: 1, cgroup_map_mode: 0, gpu_compute_audit: 0}
monitor:
  port: 9395
  pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock
mps:
  pipe_dir: /run/nvidia/mps
  log_dir: /run/nvidia/mps/log
  set_exclusive_process: false
  healthz_port: 9397
extender:
  address: 127.0.0.1
  port: 32766
"""


def test_the_documented_schema_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL)
    cfg = config.load(path, environ={})
    assert cfg["resource_prefix"] == "example.com"
    assert cfg["unit_mib"] == 50 and cfg["reserved_mib"] == 256
    assert cfg["device_plugin"]["mps_enabled"] is True
    assert cfg["device_plugin"]["switches"]["gpu_cgroup_enable"] == 1
    assert cfg["extender"]["port"] == 32766


def test_environment_overrides_common_and_section_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL)
    env = {
        "VGPU_UNIT_MIB": "25",
        "VGPU_EXTENDER_PORT": "32767",
        "VGPU_DEVICE_PLUGIN_MPS_ENABLED": "false",
        "VGPU_DEVICE_PLUGIN_SWITCHES": "{limit: 0}",
        "VGPU_MPS_START_TIMEOUT_S": "3",
    }
    cfg = config.load(path, environ=env)
    assert cfg["unit_mib"] == 25
    assert cfg["extender"]["port"] == 32767
    assert cfg["device_plugin"]["mps_enabled"] is False
    assert cfg["device_plugin"]["switches"] == {**config.DEFAULT_SWITCHES, "limit": 0}
    assert cfg["mps"]["start_timeout_s"] == 3.0


def test_missing_file_means_defaults() -> None:
    cfg = config.load("/nonexistent/config.yaml", environ={})
    assert cfg["unit_mib"] == 100 and cfg["resource_prefix"] == "vgpu.io"


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("unit_mib: lots\n", {}, "unit_mib: expected an integer, got 'lots'"),
        ("", {"VGPU_UNIT_MIB": "0"}, "unit_mib: 0 must be greater than 0 MiB"),
        ("", {"VGPU_EXTENDER_PORT": "http"}, "VGPU_EXTENDER_PORT: expected an integer"),
        ("device_plugin: [1, 2]\n", {}, "device_plugin: expected a mapping"),
        ("device_plugin: {mps_enabled: maybe}\n", {}, "device_plugin.mps_enabled: expected true or false"),
        ("device_plugin: {switches: {turbo: 1}}\n", {}, "unknown key 'turbo'"),
        ("log_format: xml\n", {}, "log_format: 'xml' is not one of json, text"),
        ("resource_prefix: nvidia.com/gpu\n", {}, "resource_prefix: 'nvidia.com/gpu' must be a DNS subdomain"),
        ("resource_prefix: gpus.kubernetes.io\n", {}, "resource_prefix: 'gpus.kubernetes.io' is in the kubernetes.io"),
        ("", {"VGPU_DEVICE_PLUGIN_SWITCHES": "{limit: 2}"}, "device_plugin.switches: limit=2 must be 0 or 1"),
        ("monitor: {grace_seconds: 90000}\n", {}, "monitor.grace_seconds: 90000.0 must be from 0 to 86400"),
        ("- a\n- b\n", {}, "expected a mapping at the top level"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as err:
        config.load(path, environ=env)
    assert message in str(err.value)


def test_dashboard_queries_only_metrics_the_monitor_exports() -> None:
    """A renamed metric must not leave the Grafana dashboard showing nothing."""
    dashboard = json.loads((SRC.parent / "dashboards" / "cgpu-monitor.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bvgpu_[a-z_]+", e)}
    source = Path(monitor_collector.__file__).read_text()
    exported = set(re.findall(r'"(vgpu_[a-z_]+)"', source))
    exported |= {f"{name}_total" for name in exported}
    assert used and used <= exported, used - exported
