"""The bundle a connected machine builds for an air-gapped site."""

BUNDLE = "/srv/vgpu-bundle"


def test_the_package_and_its_dependencies_are_in_the_bundle(host):
    files = host.check_output(f"ls {BUNDLE}/driver").split()
    names = {name.split("_", 1)[0] for name in files}
    assert "pciutils" in names
    assert "libpci3" in names, "a dependency of the named package must come along"
    assert all(name.endswith(".deb") for name in files)


def test_essential_packages_are_left_out(host):
    names = {name.split("_", 1)[0] for name in host.check_output(f"ls {BUNDLE}/driver").split()}
    assert "libc6" not in names or host.run("dpkg-query -W -f='${Essential}' libc6").stdout != "yes"
    assert "dpkg" not in names  # essential on every Debian system


def test_every_file_is_in_sha256sums_and_matches(host):
    check = host.run(f"cd {BUNDLE} && sha256sum --check --strict SHA256SUMS")
    assert check.rc == 0, check.stdout + check.stderr
    listed = {line.split(None, 1)[1] for line in host.file(f"{BUNDLE}/SHA256SUMS").content_string.splitlines()}
    on_disk = set(host.check_output(f"cd {BUNDLE} && find . -type f ! -name SHA256SUMS -printf '%P\\n'").split())
    assert listed == on_disk
    assert "k3s/licence.txt" in listed


def test_a_changed_file_is_caught_by_the_checksums(host):
    host.run(f"cp {BUNDLE}/k3s/licence.txt /tmp/licence.bak && echo tampered >> {BUNDLE}/k3s/licence.txt")
    try:
        assert host.run(f"cd {BUNDLE} && sha256sum --check --quiet SHA256SUMS").rc != 0
    finally:
        host.run(f"cp /tmp/licence.bak {BUNDLE}/k3s/licence.txt")
