"""The kubeadm role's image check: which images an offline bundle's archive holds, named as
containerd lists them, so a present image is never imported again and a lost one always is."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.images import (
    FilterModule,
    archive_images,
    normalized_image_reference,
)

# manifest.json of the bundle's images/kubernetes-v1.36.3.tar (docker save), shortened.
BUNDLE_MANIFEST = json.dumps(
    [
        {"Config": "a.json", "RepoTags": ["registry.k8s.io/kube-proxy:v1.36.3"], "Layers": ["1/layer.tar"]},
        {"Config": "b.json", "RepoTags": ["registry.k8s.io/etcd:3.6.8-0"], "Layers": ["2/layer.tar"]},
        {"Config": "c.json", "RepoTags": ["registry.k8s.io/pause:3.10.2"], "Layers": ["3/layer.tar"]},
    ]
)


def test_the_bundles_archive_names_its_images_as_ctr_lists_them():
    assert archive_images(BUNDLE_MANIFEST) == [
        "registry.k8s.io/kube-proxy:v1.36.3",
        "registry.k8s.io/etcd:3.6.8-0",
        "registry.k8s.io/pause:3.10.2",
    ]


@pytest.mark.parametrize(
    ("saved", "listed"),
    [
        ("pause:3.10", "docker.io/library/pause:3.10"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("rancher/mirrored-pause:3.6", "docker.io/rancher/mirrored-pause:3.6"),
        ("localhost/vgpu-components:0.1.0", "localhost/vgpu-components:0.1.0"),
        ("registry.local:5000/team/app:1", "registry.local:5000/team/app:1"),
        ("quay.io/app@sha256:" + "0" * 64, "quay.io/app@sha256:" + "0" * 64),
    ],
)
def test_docker_short_names_become_containerds_full_references(saved, listed):
    """Without this, an image saved as "pause:3.10" would read as missing after every import, and
    every rerun would import the archive again (a rerun must report 0 changed)."""
    assert normalized_image_reference(saved) == listed


def test_an_image_with_several_tags_counts_each_once_and_untagged_ones_are_skipped():
    manifest = json.dumps(
        [
            {"RepoTags": ["app:1", "app:latest"]},
            {"RepoTags": None},
            {"RepoTags": ["app:1"]},
        ]
    )
    assert archive_images(manifest) == ["docker.io/library/app:1", "docker.io/library/app:latest"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "its manifest.json is not JSON"),
        ('{"manifests": []}', "its manifest.json is not a list of images"),
        ('[{"RepoTags": null}]', "names no image"),
    ],
)
def test_a_manifest_that_names_nothing_fails_naming_the_archive(text, said):
    with pytest.raises(AnsibleFilterError) as raised:
        archive_images(text, "/srv/bundle/images/kubernetes-v1.36.3.tar")
    assert "/srv/bundle/images/kubernetes-v1.36.3.tar" in str(raised.value)
    assert said in str(raised.value)


def test_the_filter_is_registered():
    assert FilterModule().filters()["archive_images"] is archive_images
