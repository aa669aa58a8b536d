"""The inventory check (issue 25 item 2): a wrong path or a misspelt group is named with its fix."""

from ansible_collections.vgpu.isolation.plugins.filter.inventory import FilterModule, inventory_problems
from ansible_collections.vgpu.isolation.plugins.module_utils.topology import topology_problems

GROUPS = {"all": ["cp", "gpu-1"], "ungrouped": [], "k8s_control_plane": ["cp"], "gpu_nodes": ["gpu-1"]}


def test_an_inventory_with_both_groups_passes(tmp_path):
    (tmp_path / "hosts.yml").write_text("{}")
    assert inventory_problems(GROUPS, [str(tmp_path / "hosts.yml")]) == []


def test_a_missing_path_is_reported_alone(tmp_path):
    missing = str(tmp_path / "mysite" / "hosts.yml")
    (problem,) = inventory_problems({"all": [], "ungrouped": []}, [missing])
    assert problem.startswith(f"inventory: {missing} does not exist; give the path of your inventory file or folder")


def test_a_host_list_given_with_i_is_no_path():
    assert inventory_problems(GROUPS, ["cp,gpu-1,"]) == []


def test_a_cluster_needs_its_control_plane_and_gpu_nodes_without_a_cluster_do_not():
    groups = {"all": ["gpu-1"], "gpu_nodes": ["gpu-1"]}
    (problem,) = inventory_problems(groups, [], "k3s")
    assert problem.startswith("inventory: the group k8s_control_plane has no host")
    assert inventory_problems(groups, [], "none") == []


def test_the_closest_existing_group_is_suggested():
    groups = {"all": ["cp", "g"], "k8s_control_plane": ["cp"], "gpu-nodes": ["g"], "edge": ["g"]}
    (problem,) = inventory_problems(groups, [])
    assert problem.endswith("did you mean gpu-nodes? (rename that group to gpu_nodes)")


def test_the_plugin_exposes_the_filter():
    assert FilterModule().filters() == {
        "inventory_problems": inventory_problems,
        "topology_problems": topology_problems,
    }
