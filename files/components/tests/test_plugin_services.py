"""The device plugin's gRPC services (plugin_services.py) against a real gRPC kubelet peer
(FakeKubelet): preferred allocation, refused Allocates, and the ListAndWatch message budget.
The fixture `node` (component_fixtures.py) is a PluginNode with a fake NVML."""

from __future__ import annotations

import hashlib

import grpc
import pytest
from fakes import GIB, PluginNode, allocate, two_gpus
from vgpu_components.allocator import DeviceTable
from vgpu_components.nvml import Gpu
from vgpu_components.plugin_services import AdvertiseError, check_message_size

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


def test_preferred_allocation_packs_one_container_on_the_fullest_gpu_that_fits(node: PluginNode) -> None:
    msgs = node.kubelet.msgs
    available = [f"{KEY0}-{n}" for n in range(50)] + [f"{KEY1}-{n}" for n in range(122)]

    def prefer(size: int, must: list[str] | None = None) -> list[str]:
        req = msgs.PreferredAllocationRequest(
            container_requests=[
                msgs.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must or [], allocation_size=size
                )
            ]
        )
        return list(node.kubelet.stub.GetPreferredAllocation(req, timeout=5).container_responses[0].deviceIDs)

    small = prefer(30)
    assert len(small) == 30 and all(d.startswith(KEY0 + "-") for d in small)  # GPU0 has less free and fits
    big = prefer(80)
    assert len(big) == 80 and all(d.startswith(KEY1 + "-") for d in big)  # only GPU1 fits 80
    reused = prefer(20, must=[f"{KEY1}-5"])
    assert f"{KEY1}-5" in reused and all(d.startswith(KEY1 + "-") for d in reused)


@pytest.mark.parametrize(
    ("device_ids", "message"),
    [
        ([f"{KEY0}-1", f"{KEY1}-2"], "must come from one GPU"),
        (["ffffff-1"], "not on this node"),
        ([f"{KEY0}-999"], "has only 122 units"),
        (["GPU-1234"], "not of the form"),
        ([f"{KEY0}-1", f"{KEY0}-1"], "duplicate"),
    ],
)
def test_allocate_refuses_bad_device_sets_with_a_reason(node: PluginNode, device_ids: list[str], message: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        allocate(node, device_ids)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_too_small_unit_is_refused_loudly_and_default_unit_fits_an_8x141g_node() -> None:
    big = [Gpu(uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd", index=i, total_mib=141 * GIB) for i in range(8)]
    size = check_message_size(DeviceTable(big, 100), 2 * 1024 * 1024)
    assert size < 2 * 1024 * 1024
    with pytest.raises(AdvertiseError) as err:
        check_message_size(DeviceTable(big, 1), 2 * 1024 * 1024)
    assert "set unit_mib to at least" in str(err.value)
