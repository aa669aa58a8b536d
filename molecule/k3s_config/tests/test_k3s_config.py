"""What the k3s role leaves on a single-node edge when K3s is rendered but not started."""

import yaml


def read_yaml(host, path):
    return yaml.safe_load(host.file(path).content_string)


def test_binary_from_the_bundle_and_tool_links(host):
    binary = host.file("/usr/local/bin/k3s")
    assert binary.mode == 0o755
    assert "v1.36.3+k3s1" in host.check_output("/usr/local/bin/k3s --version")
    for tool in ("kubectl", "crictl", "ctr"):
        assert host.file(f"/usr/local/bin/{tool}").linked_to == "/usr/local/bin/k3s"


def test_airgap_images_where_k3s_imports_them(host):
    images = host.file("/var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar.zst")
    assert images.exists
    assert images.content_string == "not a real image archive\n"


def is_server(host):
    return "k8s_control_plane" in host.ansible.get_variables()["group_names"]


def test_config_names_the_node_and_keeps_the_token_private(host):
    config = host.file("/etc/rancher/k3s/config.yaml")
    assert config.mode == 0o600
    data = read_yaml(host, "/etc/rancher/k3s/config.yaml")
    assert data["token"] == host.ansible.get_variables()["k3s_token"]
    if is_server(host):
        assert data["node-name"] == "edge-1"
        assert data["write-kubeconfig-mode"] == "0600"
        assert "server" not in data, "the first server initialises, it joins nobody"
        assert "cluster-init" not in data, "one server: no embedded etcd needed"
    else:
        assert data["node-name"] == host.check_output("uname -n").lower()
        assert data["server"] == "https://192.0.2.10:6443"
        assert "write-kubeconfig-mode" not in data


def test_scheduler_dropin_and_configuration(host):
    if not is_server(host):
        assert not host.file("/etc/rancher/k3s/config.yaml.d/50-vgpu-scheduler.yaml").exists
        assert not host.file("/etc/rancher/k3s/vgpu-scheduler-config.yaml").exists
        return
    dropin = read_yaml(host, "/etc/rancher/k3s/config.yaml.d/50-vgpu-scheduler.yaml")
    assert dropin == {"kube-scheduler-arg+": ["config=/etc/rancher/k3s/vgpu-scheduler-config.yaml"]}
    config = read_yaml(host, "/etc/rancher/k3s/vgpu-scheduler-config.yaml")
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["clientConnection"]["kubeconfig"] == "/var/lib/rancher/k3s/server/cred/scheduler.kubeconfig"
    (extender,) = config["extenders"]
    # Mutual TLS with the extender (issue 12): the certificates the role made on this server.
    assert extender["urlPrefix"] == "https://127.0.0.1:32766"
    assert extender["enableHTTPS"] is True
    tls = extender["tlsConfig"]
    assert tls == {
        "certFile": "/etc/vgpu/tls/client.crt",
        "keyFile": "/etc/vgpu/tls/client.key",
        "caFile": "/etc/vgpu/tls/ca.crt",
    }
    for name in ("client.crt", "ca.crt"):
        assert host.file(f"/etc/vgpu/tls/{name}").exists
    assert host.file("/etc/vgpu/tls/client.key").mode == 0o600
    assert extender["nodeCacheCapable"] is True
    assert extender["preemptVerb"] == "preempt"
    assert extender["managedResources"] == [
        {"name": "acme.dev/gpu-memory", "ignoredByScheduler": False},
        {"name": "acme.dev/gpu-cores", "ignoredByScheduler": False},
    ]


def test_unit_runs_server_or_agent_and_is_not_started(host):
    role, other = ("k3s", "k3s-agent") if is_server(host) else ("k3s-agent", "k3s")
    unit = host.file(f"/etc/systemd/system/{role}.service").content_string
    assert f"ExecStart=/usr/local/bin/k3s {'server' if is_server(host) else 'agent'}" in unit
    assert not host.service(role).is_running
    assert not host.file(f"/etc/systemd/system/{other}.service").exists


def test_restart_helper_is_installed_on_servers(host):
    if not is_server(host):
        assert not host.file("/usr/local/sbin/vgpu-restart-kube-scheduler").exists
        return
    helper = host.file("/usr/local/sbin/vgpu-restart-kube-scheduler")
    assert helper.mode == 0o755
    assert "systemctl restart k3s" in helper.content_string
