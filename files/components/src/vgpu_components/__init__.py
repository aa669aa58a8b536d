"""vgpu.isolation kube-system components: device plugin, scheduler extender, monitor, MPS supervisor."""

__version__ = "0.1.0"
