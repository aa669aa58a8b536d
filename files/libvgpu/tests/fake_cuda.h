/* Internals shared by fake_cuda.c and fake_graphs.c (the fake CUDA driver). */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stdint.h>

#include "abi.h"

#define FAKE_HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))

/* fake_cuda.c */
FAKE_HIDDEN int fake_ready(void);
FAKE_HIDDEN int fake_current_dev(void);   /* ordinal of the current context, -1 = none */
FAKE_HIDDEN int fake_valid_dev(int dev);
FAKE_HIDDEN int fake_device_reserve(int dev, uint64_t bytes); /* device memory: 0, or -1 when full */
FAKE_HIDDEN void fake_device_release(int dev, uint64_t bytes);
FAKE_HIDDEN CUresult fake_free(uint64_t key);

/* fake_graphs.c */
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags);
/* 1 when the call was a stream capture's or a graph allocation's (*rc set) */
FAKE_HIDDEN int fake_capture_alloc(CUstream s, uint64_t bytes, int dev, CUdeviceptr *p, CUresult *rc);
FAKE_HIDDEN int fake_capture_free(CUstream s, CUdeviceptr p, CUresult *rc);
FAKE_HIDDEN int fake_capture_memset(CUstream s, CUdeviceptr p, unsigned char value, size_t bytes, CUresult *rc);
FAKE_HIDDEN int fake_graph_free(CUdeviceptr p, CUresult *rc);
#endif
