/* Internals shared by the fake CUDA driver's files: fake_cuda.c (devices, contexts, linear
 * memory), fake_memory.c (pools, virtual memory, IPC, host memory), fake_modules.c (modules,
 * libraries, limits) and fake_graphs.c. */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stdint.h>

#include "abi.h"

#define FAKE_HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
#define FAKE_MIB (1024ULL * 1024ULL)

/* A context: its device, its limits and the device memory they take. */
struct CUctx_st {
    int live;
    int dev;
    int primary;
    uint64_t stack, heap;             /* CU_LIMIT_STACK_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE */
    uint64_t stack_bytes, heap_bytes; /* device memory they take now (beyond the context's cost) */
};

/* fake_cuda.c */
FAKE_HIDDEN int fake_ready(void);
FAKE_HIDDEN int fake_current_dev(void); /* ordinal of the current context, -1 = none */
FAKE_HIDDEN CUcontext fake_current_ctx(void);
FAKE_HIDDEN int fake_valid_dev(int dev);
FAKE_HIDDEN int fake_device_reserve(int dev, uint64_t bytes); /* device memory: 0, or -1 when full */
FAKE_HIDDEN void fake_device_release(int dev, uint64_t bytes);
FAKE_HIDDEN CUresult fake_free(uint64_t key);
/* A block of host memory standing for bytes of device dev (-1: host memory, not charged); *key
 * == 1 asks for a handle as the key instead of the address. */
FAKE_HIDDEN CUresult fake_block_add(uint64_t bytes, int dev, uint64_t *key, void **mem);
FAKE_HIDDEN int fake_block_size(uint64_t key, uint64_t *bytes); /* 1 when key is a live block */
/* A setting of the environment in MiB (FAKE_CTX_MIB...), as bytes; def when unset. */
FAKE_HIDDEN uint64_t fake_env_bytes(const char *name, uint64_t def_mib);
FAKE_HIDDEN uint64_t fake_env_number(const char *name, uint64_t def);

/* fake_memory.c: stream-ordered pools, virtual memory, IPC, host memory */
FAKE_HIDDEN void fake_pools_synchronized(void);   /* a synchronize: pools give back above their threshold */
FAKE_HIDDEN int fake_pool_free(CUdeviceptr p);     /* 1 when p was a pool allocation (now freed) */
FAKE_HIDDEN CUresult fake_pool_alloc(CUmemoryPool pool, uint64_t bytes, CUdeviceptr *p);
FAKE_HIDDEN CUmemoryPool fake_current_pool(int dev);
FAKE_HIDDEN void fake_memory_forget(void);         /* a fork child holds none of it */

/* fake_modules.c: modules, libraries, limits */
FAKE_HIDDEN void fake_modules_context_gone(CUcontext c); /* its module memory goes with it */
/* What a launch of f grows (a library's lazy load, the stack, the heap): CUDA_SUCCESS, or the
 * launch's error (CUDA_ERROR_OUT_OF_MEMORY when the device has no room). */
FAKE_HIDDEN CUresult fake_launch_grows(CUfunction f);
FAKE_HIDDEN void fake_context_limits_gone(CUcontext c);
FAKE_HIDDEN void fake_modules_forget(void);

/* fake_graphs.c */
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags);
/* 1 when the call was a stream capture's or a graph allocation's (*rc set) */
FAKE_HIDDEN int fake_capture_alloc(CUstream s, uint64_t bytes, int dev, CUdeviceptr *p, CUresult *rc);
FAKE_HIDDEN int fake_capture_free(CUstream s, CUdeviceptr p, CUresult *rc);
FAKE_HIDDEN int fake_capture_memset(CUstream s, CUdeviceptr p, unsigned char value, size_t bytes, CUresult *rc);
FAKE_HIDDEN int fake_graph_free(CUdeviceptr p, CUresult *rc);
#endif
