"""The scheduler configuration: written once, restarted only on change, rolled back on failure."""

import yaml

CONFIG = "/etc/kubernetes/vgpu-scheduler-config.yaml"


def test_the_good_configuration_is_back_in_place(host):
    config = yaml.safe_load(host.file(CONFIG).content_string)
    assert config["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    assert config["extenders"][0]["managedResources"] == [
        {"name": "vgpu.io/gpu-memory", "ignoredByScheduler": False},
        {"name": "vgpu.io/gpu-cores", "ignoredByScheduler": False},
    ]
    assert host.file(CONFIG).mode == 0o600


def test_kube_scheduler_restarted_for_the_first_write_the_bad_one_and_the_roll_back_only(host):
    calls = host.file("/var/log/fake-crictl.log").content_string.splitlines()
    stops = [c for c in calls if c.startswith("stopp")]
    # converge (new file), side effect (bad file), roll back; idempotence added none.
    assert stops == ["stopp fake-kube-scheduler-pod"] * 3


def test_the_failure_names_the_file_and_the_backup(host):
    message = host.file("/var/log/vgpu-rollback-message").content_string
    assert "did not become healthy" in message
    assert CONFIG in message
    assert "was restored" in message


def test_a_backup_of_the_good_configuration_was_kept(host):
    backups = host.check_output("ls /etc/kubernetes | grep -c '^vgpu-scheduler-config.yaml\\..*~$' || true")
    assert int(backups) >= 1
