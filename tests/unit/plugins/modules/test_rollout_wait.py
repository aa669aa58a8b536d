"""rollout_wait's part between the role and the API: what it waits on, and how API answers count.
Following progress is tested in tests/unit/plugins/module_utils/test_rollout_progress.py, and the
module against a real kube-apiserver in tests/k8s/test_day_two.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils.rollout_progress import ReadError
from ansible_collections.vgpu.isolation.plugins.modules import rollout_wait
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ProtocolError


def obj(kind: str, name: str, namespace: str | None = "kube-system") -> dict[str, Any]:
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"kind": kind, "metadata": meta}


def test_it_waits_on_the_daemonsets_and_deployments_once_each_in_order() -> None:
    applied = [
        obj("ConfigMap", "vgpu-config"),
        obj("DaemonSet", "cgpu-monitor"),
        obj("Deployment", "web", None),
        obj("DaemonSet", "cgpu-monitor"),
        obj("Secret", "tls"),
    ]
    assert rollout_wait.targets(applied) == [
        ("DaemonSet", "kube-system", "cgpu-monitor"),
        ("Deployment", "default", "web"),
    ]


class Answer:
    def __init__(self, body: Any) -> None:
        self.data = json.dumps(body).encode()


def answering(result: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        assert kwargs["_request_timeout"] == rollout_wait.REQUEST_TIMEOUT, "a hung API call must not hang the wait"
        if isinstance(result, BaseException):
            raise result
        return Answer(result)

    return call


def test_an_object_is_read_as_the_api_serves_it() -> None:
    assert rollout_wait._read(answering({"kind": "DaemonSet"})) == {"kind": "DaemonSet"}


def test_an_object_not_created_yet_is_none() -> None:
    assert rollout_wait._read(answering(ApiException(status=404, reason="Not Found"))) is None


@pytest.mark.parametrize(
    "error",
    [ApiException(status=503, reason="Service Unavailable"), ApiException(status=429, reason="Too Many"),
     ProtocolError("connection reset"), ConnectionRefusedError("refused")],
)  # fmt: skip
def test_a_loaded_api_server_is_a_failed_read_not_a_verdict(error: BaseException) -> None:
    with pytest.raises(ReadError):
        rollout_wait._read(answering(error))


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_identity_fails_at_once(status: int) -> None:
    with pytest.raises(rollout_wait.Refused):
        rollout_wait._read(answering(ApiException(status=status, reason="Forbidden")))
