"""Who holds the device plugin's units, from the kubelet PodResources API.

Each poll also feeds the share ledger (which containers hold which compute shares, shares.py) and
collects the host folders of containers kubelet no longer lists (host_paths.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpu_components import ids
from vgpu_components.host_paths import HostPaths
from vgpu_components.plugin_services import resource_name, shares_resource_name
from vgpu_components.podresources import ContainerDevices, PodResourcesClient
from vgpu_components.shares import ShareLedger, ShareTokens, holders


class Holders:
    def __init__(
        self,
        cfg: dict[str, Any],
        pod_resources: PodResourcesClient | None,
        ledger: ShareLedger,
        tokens: ShareTokens | None,
        host_paths: HostPaths,
    ) -> None:
        self.cfg = cfg
        self.pod_resources = pod_resources
        self.ledger = ledger
        self.tokens = tokens
        self.host_paths = host_paths

    def listed(self) -> list[ContainerDevices] | None:
        """The containers kubelet has handed our units to, with their share tokens on a node with
        compute shares; None without the API."""
        if self.pod_resources is None:
            return None
        shares = [shares_resource_name(self.cfg)] if self.tokens is not None else []
        found = self.pod_resources.list(resource_name(self.cfg), also=shares)
        if self.tokens is not None:
            self.ledger.observe(holders((h.device_ids, h.others.get(shares[0], ())) for h in found))
        return found

    def poll(self) -> list[ContainerDevices] | None:
        """listed(), and the host folders of containers no longer listed collected."""
        found = self.listed()
        if found is not None:
            self.host_paths.collect(ids.alloc_id(h.device_ids) for h in found)
        return found


def used_units(found: Sequence[ContainerDevices]) -> dict[str, int]:
    """Units per GPU key held by these containers."""
    used: dict[str, int] = {}
    for holder in found:
        for dev in holder.device_ids:
            try:
                key = ids.parse_device_id(dev)[0]
            except ValueError:
                continue
            used[key] = used.get(key, 0) + 1
    return used
