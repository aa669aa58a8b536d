"""ListAndWatch message size for an 8 x 141 GiB node, against kubelet's 4 MiB receive limit.

Ours: short IDs `<6 hex>-<n>` at the default 100 MiB unit, serialized with the real v1beta1
message. Baselines in the same run: the same node with UUID-style IDs (`<GPU-UUID>-_-<n>`, the
Aliyun scheme) at 100 MiB and at 1 MiB units, and our IDs at 1 MiB. Also the smallest unit our
2 MiB budget allows for this node.

    .venv/bin/python bench/listandwatch_size.py
"""

from __future__ import annotations

import json
from typing import Any

import _components_path
from vgpu_components import protos
from vgpu_components.allocator import DeviceTable
from vgpu_components.nvml import Gpu

GPU_MIB = 141 * 1024
BUDGET = 2 * 1024 * 1024
KUBELET_LIMIT = 4 * 1024 * 1024
GPUS = [Gpu(uuid=f"GPU-{i:08x}-5c5e-11ee-9a51-0242ac120002", index=i, total_mib=GPU_MIB) for i in range(8)]


def size_ours(unit: int) -> tuple[int, int]:
    msgs = protos.deviceplugin()[0]
    table = DeviceTable(GPUS, unit)
    devices = table.devices()
    return len(devices), msgs.ListAndWatchResponse(devices=[msgs.Device(ID=d, health=h) for d, h in devices]).ByteSize()


def size_uuid_ids(unit: int) -> tuple[int, int]:
    msgs = protos.deviceplugin()[0]
    devices = [msgs.Device(ID=f"{g.uuid}-_-{n}", health="Healthy") for g in GPUS for n in range(g.total_mib // unit)]
    return len(devices), msgs.ListAndWatchResponse(devices=devices).ByteSize()


def row(name: str, unit: int, counted: tuple[int, int]) -> dict[str, Any]:
    count, size = counted
    return {
        "case": name,
        "unit_mib": unit,
        "devices": count,
        "bytes": size,
        "MiB": round(size / 2**20, 3),
        "under_2MiB_budget": size <= BUDGET,
        "under_kubelet_4MiB": size <= KUBELET_LIMIT,
    }


def main() -> int:
    rows = [
        row("ours: <key>-<n>", 100, size_ours(100)),
        row("baseline: <UUID>-_-<n>", 100, size_uuid_ids(100)),
        row("ours: <key>-<n>", 1, size_ours(1)),
        row("baseline: <UUID>-_-<n>", 1, size_uuid_ids(1)),
    ]
    smallest = next(u for u in range(1, 101) if size_ours(u)[1] <= BUDGET)
    print(json.dumps({"src": str(_components_path.ROOT), "gpus": 8, "gpu_mib": GPU_MIB}))
    for r in rows:
        print(json.dumps(r))
    print(
        json.dumps(
            {
                "smallest_unit_mib_within_2MiB": smallest,
                "ratio_uuid_vs_ours_at_100": round(rows[1]["bytes"] / rows[0]["bytes"], 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
