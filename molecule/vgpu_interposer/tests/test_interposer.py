"""What the vgpu_interposer role leaves on a node: an atomic, versioned install of libvgpu in /opt/vgpu."""

import json

INSTALLED = ["libcuda.so.1", "libnvidia-ml.so.1", "libvgpu.so", "manage", "vgpu-memory-usage"]


def test_prefix_is_a_symlink_to_a_versioned_release(host):
    prefix = host.file("/opt/vgpu")
    assert prefix.is_symlink
    target = prefix.linked_to
    assert target.startswith("/opt/vgpu-releases/")
    assert host.file(target).is_directory
    assert not host.file(target + ".partial").exists


def test_every_file_containers_need_is_installed(host):
    for name in INSTALLED:
        installed = host.file(f"/opt/vgpu/{name}")
        assert installed.exists, name
        assert installed.mode & 0o111, f"{name} is not executable"


def test_the_libraries_are_shared_objects_of_the_node(host):
    for name in ("libcuda.so.1", "libnvidia-ml.so.1", "libvgpu.so"):
        header = host.check_output(f"head -c 18 /opt/vgpu/{name} | od -An -tx1 | tr -d ' \\n'")
        assert header.startswith("7f454c46"), f"{name} is not ELF"
        assert header[32:36] == "0300", f"{name} is not a shared object (e_type {header[32:36]})"


def test_the_release_is_recorded_as_a_local_fact(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/vgpu_interposer.fact").content_string)
    assert fact["prefix"] == "/opt/vgpu"
    assert fact["release_dir"] == host.file("/opt/vgpu").linked_to
    assert fact["compiler"].startswith(("cc ", "gcc"))


def test_the_build_folder_is_cleaned_up(host):
    assert not host.file("/var/cache/vgpu-build").exists


def test_manage_reset_repairs_a_corrupted_region(host):
    """No GPU here, so no CUDA process writes a region: a garbage one stands in for a corrupted region."""
    region = host.check_output("mktemp -d")
    try:
        host.check_output(f"head -c 4096 /dev/urandom > {region}/vgpu.region")
        reset = host.run(f"VGPU_REGION_DIR={region} /opt/vgpu/manage --reset")
        assert reset.rc == 0, reset.stderr
        assert "re-initialised" in reset.stdout
        stats = host.run(f"VGPU_REGION_DIR={region} /opt/vgpu/manage --stats --json")
        assert stats.rc == 0, stats.stderr
        json.loads(stats.stdout)  # a valid region again: the stats are well-formed JSON
    finally:
        host.run(f"rm -rf {region}")
