"""Kubelet gRPC API definitions; the *_pb2*.py stubs are generated (see vgpu_components.protos)."""
