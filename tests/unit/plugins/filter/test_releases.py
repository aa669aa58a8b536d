"""Which interposer releases the vgpu_interposer role prunes (issue 14 item 5).

A running container bind-mounted the release /opt/vgpu pointed at when it started (a bind mount
resolves the symlink at mount time), so a release still mounted is in use even after the symlink
moved on: pruning it would empty the folder under the container's feet.
"""

from ansible_collections.vgpu.isolation.plugins.filter.releases import FilterModule, releases_to_prune


def release(name, mtime, dev=2049, ino=None):
    return {"path": f"/opt/vgpu-releases/{name}", "mtime": mtime, "dev": dev, "inode": ino or mtime}


RELEASES = [release("a", 1), release("b", 2), release("c", 3), release("d", 4)]


def test_the_current_and_the_newest_others_are_kept_up_to_the_count():
    pruned = releases_to_prune(RELEASES, "/opt/vgpu-releases/d", [], 2)
    assert pruned == ["/opt/vgpu-releases/a", "/opt/vgpu-releases/b"]
    assert releases_to_prune(RELEASES, "/opt/vgpu-releases/d", [], 1) == [
        "/opt/vgpu-releases/a",
        "/opt/vgpu-releases/b",
        "/opt/vgpu-releases/c",
    ]


def test_a_release_a_running_container_still_has_mounted_is_kept():
    """Before the fix the handler pruned by age alone: "a" went while a pod still ran on it."""
    in_use = ["2049:1"]  # stat -L of /proc/<pid>/root/opt/vgpu in the pod: the old release's folder
    assert releases_to_prune(RELEASES, "/opt/vgpu-releases/d", in_use, 2) == ["/opt/vgpu-releases/b"]


def test_the_same_inode_on_another_device_is_not_in_use():
    assert releases_to_prune(RELEASES, "/opt/vgpu-releases/d", ["64:1"], 2) == [
        "/opt/vgpu-releases/a",
        "/opt/vgpu-releases/b",
    ]


def test_the_filter_plugin_exposes_it():
    assert FilterModule().filters()["releases_to_prune"] is releases_to_prune
