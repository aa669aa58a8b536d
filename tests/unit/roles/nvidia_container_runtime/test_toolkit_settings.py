"""The runtime role's toolkit settings (roles/nvidia_container_runtime/tasks/settings.yml) run for real:
ansible-playbook on localhost with NVIDIA's nvidia-ctk built from the pinned sources
(toolkit_binaries.py) on a configuration file in a temporary folder, as the toolkit's package writes
it. The runtime must take an unprivileged container's devices from the device-list mounts of the
container contract and never from its NVIDIA_VISIBLE_DEVICES (issue 28); a rerun changes nothing and
check mode changes nothing."""

import json
import subprocess
from pathlib import Path

import pytest
import tomllib
import toolkit_binaries
from recap import changed_count
from role_render import role_tasks_play, run_playbook


@pytest.fixture(scope="module")
def tools():
    return toolkit_binaries.folder()


def fresh_config(tools: Path, folder: Path) -> Path:
    """The configuration the toolkit's package installs (`nvidia-ctk config default`)."""
    path = folder / "config.toml"
    text = subprocess.run([str(tools / "nvidia-ctk"), "config", "default"], capture_output=True, text=True, check=True)
    path.write_text(text.stdout)
    return path


def converge(tools: Path, folder: Path, config: Path, *args: str, mode: str = "auto", **settings: object) -> int:
    (folder / "play.yml").write_text(
        role_tasks_play("The runtime's settings, as the role sets them", "nvidia_container_runtime", "settings.yml")
    )
    variables = {
        **settings,
        "nvidia_container_runtime_mode": mode,
        "__nvidia_container_runtime_config_file": str(config),
        # What runtime.yml found before it includes settings.yml (read in check mode only).
        "__nvidia_container_runtime_ctk_present": {"stat": {"exists": True}},
    }
    run = run_playbook(str(folder / "play.yml"), "-e", json.dumps(variables), *args, path_prefix=str(tools))
    return changed_count(run.stdout)


def test_the_runtime_takes_no_devices_from_an_unprivileged_containers_env(tools, tmp_path):
    """As shipped the toolkit reads NVIDIA_VISIBLE_DEVICES from every container (the default is
    commented out as true); the role turns that off and the device-list mounts on, and sets the mode."""
    config = fresh_config(tools, tmp_path)
    before = tomllib.loads(config.read_text())
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged" not in before  # the toolkit's default: true
    assert converge(tools, tmp_path, config, mode="cdi") == 2  # these three, and the capabilities
    after = tomllib.loads(config.read_text())
    assert after["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert after["accept-nvidia-visible-devices-as-volume-mounts"] is True
    assert after["nvidia-container-runtime"]["mode"] == "cdi"
    # Graphics withheld, the low-level runtime is the role's filter (test_38_graphics_withheld.py).
    assert after["nvidia-container-runtime"]["runtimes"] == ["/usr/local/libexec/vgpu-isolation/runc-without-graphics"]
    # Everything else is the package's.
    assert after["nvidia-container-runtime"]["log-level"] == before["nvidia-container-runtime"]["log-level"]


def test_a_rerun_changes_nothing(tools, tmp_path):
    config = fresh_config(tools, tmp_path)
    converge(tools, tmp_path, config)
    text = config.read_text()
    assert converge(tools, tmp_path, config) == 0
    assert config.read_text() == text


def test_check_mode_reports_the_change_and_makes_none(tools, tmp_path):
    config = fresh_config(tools, tmp_path)
    text = config.read_text()
    converge(tools, tmp_path, config, "--check")
    assert config.read_text() == text


def test_a_setting_changed_by_hand_is_put_back(tools, tmp_path):
    """An operator (or a package upgrade) that turns the env back on is undone by the next run."""
    config = fresh_config(tools, tmp_path)
    converge(tools, tmp_path, config)
    subprocess.run(
        [
            str(tools / "nvidia-ctk"),
            "config",
            f"--config-file={config}",
            "--in-place",
            "--set=accept-nvidia-visible-devices-envvar-when-unprivileged=true",
        ],
        check=True,
    )
    assert converge(tools, tmp_path, config) == 1
    assert tomllib.loads(config.read_text())["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False


def test_the_graphics_capability_is_withheld_unless_the_operator_enables_it(tools, tmp_path):
    """Issue 38 item 3: the runtime handed NVIDIA's graphics libraries (OpenGL, Vulkan, EGL) to any
    GPU container that named graphics in its own NVIDIA_DRIVER_CAPABILITIES, and graphics memory
    was invisible to the monitor. The runtime's supported-driver-capabilities is the list a
    container's env is held to (its hook refuses a container that asks for more), and the pod's env
    cannot change it: without vgpu_graphics_enabled it has neither graphics nor display."""
    config = fresh_config(tools, tmp_path)
    before = tomllib.loads(config.read_text())
    assert "graphics" in before["supported-driver-capabilities"]  # the toolkit's default: every capability
    converge(tools, tmp_path, config)
    withheld = tomllib.loads(config.read_text())["supported-driver-capabilities"]
    assert withheld == "compat32,compute,ngx,utility,video"
    assert converge(tools, tmp_path, config, vgpu_graphics_enabled=True) == 2  # and the low-level runtime
    enabled = tomllib.loads(config.read_text())
    assert enabled["supported-driver-capabilities"] == "compat32,compute,display,graphics,ngx,utility,video"
    assert enabled["nvidia-container-runtime"]["runtimes"] == before["nvidia-container-runtime"]["runtimes"]
