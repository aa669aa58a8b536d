"""The contract of vgpu.isolation (contract.yml), its generator (generate.py) and the reader of the
size grammar's conformance vectors (vectors.py), which the tests of every medium share."""
