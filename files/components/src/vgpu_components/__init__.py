"""vgpu.isolation kube-system components: device plugin, scheduler extender, monitor, MPS supervisor."""

from vgpu_components.contract import VERSION as __version__  # the contract's, generated

__all__ = ["__version__"]
