/* Linear device memory: cuMemAlloc, managed, pitched, stream-ordered (default and explicit
 * pools) and physical handles of the virtual memory API, each charged before the driver call
 * and released by its own free. Stream-ordered calls under capture: see cuda_graphs.c. */
#include "cuda_shim.h"

VGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    READY_OR_RETURN();
    int dev;
    if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)
        return REAL(cuMemAlloc_v2)(dptr, size);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAlloc_v2)(dptr, size));
}

VGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    READY_OR_RETURN();
    int dev;
    if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)
        return REAL(cuMemAllocManaged)(dptr, size, flags);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAllocManaged)(dptr, size, flags));
}

VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                        unsigned int elem)
{
    READY_OR_RETURN();
    vgpu_fn_cuMemAllocPitch_v2 *real = REAL(cuMemAllocPitch_v2);
    int dev;
    uint64_t estimate;
    if (!dptr || !pitch || !width || !height || vgpu_current_device(&dev) != 0
        || __builtin_mul_overflow((uint64_t)((width + 511) & ~(size_t)511), (uint64_t)height, &estimate))
        return real(dptr, pitch, width, height, elem);
    if (vgpu_admit(dev, estimate) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        vgpu_rollback(dev, estimate);
        return rc;
    }
    uint64_t actual = (uint64_t)*pitch * height;
    if (actual != estimate) {
        /* charge what the driver really took */
        vgpu_rollback(dev, estimate);
        if (vgpu_admit(dev, actual) != 0) {
            REAL(cuMemFree_v2)(*dptr);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    vgpu_commit(VGPU_K_PTR, *dptr, actual, dev);
    return rc;
}

VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_PTR, dptr, REAL(cuMemFree_v2)(dptr));
}

/* ---- stream-ordered allocation ---- */
#define ASYNC_ALLOC(NAME)                                                                                             \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUstream stream)                                        \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)                                                     \
            return REAL(NAME)(dptr, size, stream);                                                                    \
        ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(NAME)(dptr, size, stream));                                     \
    }
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(NAME)                                                                                              \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)                     \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)                                                     \
            return REAL(NAME)(dptr, size, pool, stream);                                                              \
        ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(NAME)(dptr, size, pool, stream));                               \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

/* A free captured into a graph happens when the graph runs, if ever: the charge stays (for an
 * allocation captured in the same graph, it becomes the graph's at instantiation). */
#define ASYNC_FREE(NAME, IS_CAPTURING)                                                                                \
    VGPU_EXPORT CUresult NAME(CUdeviceptr dptr, CUstream stream)                                                      \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        if (vgpu_stream_captured(REAL(IS_CAPTURING), stream))                                                         \
            return REAL(NAME)(dptr, stream);                                                                          \
        FREE_BODY(VGPU_K_PTR, dptr, REAL(NAME)(dptr, stream));                                                        \
    }
ASYNC_FREE(cuMemFreeAsync, cuStreamIsCapturing)
ASYNC_FREE(cuMemFreeAsync_ptsz, cuStreamIsCapturing_ptsz)

/* ---- virtual memory management (physical handles) ---- */
VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    READY_OR_RETURN();
    /* only device memory counts; host (NUMA) locations do not */
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || prop->location.id < 0 || prop->location.id >= VGPU_MAX_DEVICES)
        return REAL(cuMemCreate)(handle, size, prop, flags);
    int dev = prop->location.id;
    ALLOC_BODY(VGPU_K_HANDLE, *handle, size, dev, REAL(cuMemCreate)(handle, size, prop, flags));
}

VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_HANDLE, handle, REAL(cuMemRelease)(handle));
}
