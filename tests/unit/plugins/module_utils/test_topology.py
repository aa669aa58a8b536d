"""The cluster's shape (issue 41 item 2): rules over the inventory's groups, each naming its fix."""

from __future__ import annotations

from ansible_collections.vgpu.isolation.plugins.module_utils.topology import topology_problems, unjoined_problems


def shape(
    control_planes: list[str], gpu_nodes: tuple[str, ...] = ("gpu-1",), others: tuple[str, ...] | list[str] = ()
) -> tuple[dict[str, list[str]], list[str]]:
    groups = {"k8s_control_plane": list(control_planes), "gpu_nodes": list(gpu_nodes)}
    return groups, [*control_planes, *gpu_nodes, *others]


def test_one_or_three_control_planes_with_an_endpoint_pass():
    for flavour, endpoint in (("kubeadm", {"kubeadm_control_plane_endpoint": "api.site:6443"}), ("k3s", {})):
        assert topology_problems(*shape(["cp"]), flavour) == []
        settings = endpoint or {"k3s_server_url": "https://api.site:6443"}
        assert topology_problems(*shape(["cp-1", "cp-2", "cp-3"]), flavour, settings) == []


def test_an_even_number_of_kubeadm_control_planes_is_refused_for_etcd_s_quorum():
    (problem,) = topology_problems(*shape(["cp-1", "cp-2"]), "kubeadm", {"kubeadm_control_plane_endpoint": "a:6443"})
    assert problem.startswith("k8s_control_plane: 2 hosts with vgpu_kubernetes_flavour kubeadm;")
    assert "(either one failing stops the cluster); use an odd number (1 or 3)" in problem


def test_an_external_etcd_or_datastore_has_no_quorum_of_ours():
    external = {"kubeadm_cluster_config": {"etcd": {"external": {"endpoints": ["https://etcd:2379"]}}}}
    assert topology_problems(*shape(["a", "b"]), "kubeadm", {**external, "kubeadm_control_plane_endpoint": "x:1"}) == []
    datastore = {"k3s_server_config": {"datastore-endpoint": "postgres://db"}, "k3s_server_url": "https://x:6443"}
    assert topology_problems(*shape(["a", "b"]), "k3s", datastore) == []


def test_k3s_with_two_servers_and_embedded_etcd_is_refused():
    (problem,) = topology_problems(*shape(["s-1", "s-2"]), "k3s", {"k3s_server_url": "https://x:6443"})
    assert "K3s with several servers runs its embedded etcd" in problem
    assert "or an external datastore (k3s_server_config: {datastore-endpoint: ...})" in problem


def test_several_control_planes_without_one_endpoint_are_refused():
    (problem,) = topology_problems(*shape(["cp-1", "cp-2", "cp-3"]), "kubeadm")
    assert problem.startswith("kubeadm_control_plane_endpoint: empty with 3 control planes, so every node joins")
    (problem,) = topology_problems(*shape(["cp-1", "cp-2", "cp-3"]), "k3s")
    assert problem.startswith("k3s_server_url: empty with 3 control planes")


def test_a_host_in_no_group_of_the_playbooks_is_named():
    (problem,) = topology_problems(*shape(["cp"], others=["gpu-9"]), "none")
    assert problem.startswith("gpu-9: in neither k8s_control_plane nor gpu_nodes, so no playbook acts on it; add it")


def test_a_gpu_node_that_never_joined_is_named_with_the_nodes_the_cluster_has():
    (problem,) = unjoined_problems({"gpu-1": "gpu-1", "gpu-2": "gpu-2"}, ["cp", "gpu-1"], "the API server")
    assert problem.startswith("gpu-2: gpu_nodes host whose node gpu-2 is not in the API server (known: cp, gpu-1)")
    assert "join it first" in problem


def test_a_kubespray_inventory_s_own_hosts_and_etcd_are_kubespray_s():
    groups = {"kube_control_plane": ["a", "b"], "k8s_control_plane": ["a", "b"], "gpu_nodes": ["w"], "etcd": ["e"]}
    assert topology_problems(groups, ["a", "b", "w", "e"], "kubeadm") == []
