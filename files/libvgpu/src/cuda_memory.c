/* Linear device memory: cuMemAlloc, managed, pitched (and the 32-bit entry points without _v2,
 * charged like their twins), each charged before the driver call and released by its free.
 * Stream-ordered allocations are cuda_pools.c's; a free of one gives it back to its pool. */
#include "cuda_shim.h"

VGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    HOOK_ENTER(cuMemAlloc_v2, dptr, size);
    int dev;
    if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)
        return REAL(cuMemAlloc_v2)(dptr, size);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAlloc_v2)(dptr, size));
}

VGPU_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int size)
{
    HOOK_ENTER(cuMemAlloc, dptr, size);
    int dev;
    if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)
        return REAL(cuMemAlloc)(dptr, size);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAlloc)(dptr, size));
}

VGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    HOOK_ENTER(cuMemAllocManaged, dptr, size, flags);
    int dev;
    if (!dptr || size == 0 || vgpu_current_device(&dev) != 0)
        return REAL(cuMemAllocManaged)(dptr, size, flags);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAllocManaged)(dptr, size, flags));
}

/* Pitched memory is charged at the driver's real pitch x height: admitted at an estimate (the
 * width rounded up to 512), settled once the driver says the pitch. */
#define PITCH_BODY(CALL, FREE)                                                                                        \
    do {                                                                                                              \
        int dev;                                                                                                      \
        uint64_t estimate;                                                                                            \
        if (!dptr || !pitch || !width || !height || vgpu_current_device(&dev) != 0                                    \
            || __builtin_mul_overflow((uint64_t)((width + 511) & ~(uint64_t)511), (uint64_t)height, &estimate))       \
            return CALL;                                                                                              \
        if (vgpu_admit(dev, estimate) != 0)                                                                           \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        CUresult rc = CALL;                                                                                           \
        if (rc != CUDA_SUCCESS) {                                                                                     \
            vgpu_rollback(dev, estimate);                                                                             \
            return rc;                                                                                                \
        }                                                                                                             \
        uint64_t actual = (uint64_t)*pitch * height;                                                                  \
        if (actual != estimate) {                                                                                     \
            /* charge what the driver really took */                                                                  \
            vgpu_rollback(dev, estimate);                                                                             \
            if (vgpu_admit(dev, actual) != 0) {                                                                       \
                FREE(*dptr);                                                                                          \
                return CUDA_ERROR_OUT_OF_MEMORY;                                                                      \
            }                                                                                                         \
        }                                                                                                             \
        vgpu_commit(VGPU_K_PTR, *dptr, actual, dev);                                                                  \
        return rc;                                                                                                    \
    } while (0)

VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                        unsigned int elem)
{
    HOOK_ENTER(cuMemAllocPitch_v2, dptr, pitch, width, height, elem);
    PITCH_BODY(REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem), REAL(cuMemFree_v2));
}

VGPU_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                                     unsigned int height, unsigned int elem)
{
    HOOK_ENTER(cuMemAllocPitch, dptr, pitch, width, height, elem);
    PITCH_BODY(REAL(cuMemAllocPitch)(dptr, pitch, width, height, elem), REAL(cuMemFree));
}

/* A free of a tracked pointer: taken out of its table before the driver call (so a re-used
 * address cannot race), released when the driver succeeds, put back when it fails. Either free
 * frees either kind of allocation: the stream-ordered table is asked first (track_async.c: a
 * stripe's lock, no lock shared by all threads), then the table of the other charges. */
#define PTR_FREE_BODY(KEY, CALL)                                                                                      \
    do {                                                                                                              \
        struct vgpu_async_entry a_, stale_;                                                                           \
        if (vgpu_async_take((uint64_t)(KEY), &a_) == 0) {                                                             \
            CUresult rc_ = CALL;                                                                                      \
            if (rc_ != CUDA_SUCCESS)                                                                                  \
                vgpu_async_put(&a_, &stale_);                                                                         \
            else                                                                                                      \
                vgpu_pool_freed(&a_);                                                                                 \
            return rc_;                                                                                               \
        }                                                                                                             \
        struct vgpu_track_entry e_;                                                                                   \
        if (vgpu_track_take_entry(VGPU_K_PTR, (uint64_t)(KEY), &e_) != 0)                                             \
            return CALL;                                                                                              \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ != CUDA_SUCCESS)                                                                                      \
            vgpu_track_put_entry(&e_, &e_);                                                                           \
        else                                                                                                          \
            vgpu_released(e_.dev, e_.bytes);                                                                          \
        return rc_;                                                                                                   \
    } while (0)

VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    HOOK_ENTER(cuMemFree_v2, dptr);
    PTR_FREE_BODY(dptr, REAL(cuMemFree_v2)(dptr));
}

VGPU_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    HOOK_ENTER(cuMemFree, dptr);
    PTR_FREE_BODY(dptr, REAL(cuMemFree)(dptr));
}

/* A free captured into a graph happens when the graph runs, if ever: the charge stays (for an
 * allocation captured in the same graph, it becomes the graph's at instantiation). */
#define ASYNC_FREE(NAME, IS_CAPTURING)                                                                                \
    VGPU_EXPORT CUresult NAME(CUdeviceptr dptr, CUstream stream)                                                      \
    {                                                                                                                 \
        HOOK_ENTER(NAME, dptr, stream);                                                                               \
        if (vgpu_stream_captured(REAL(IS_CAPTURING), stream))                                                         \
            return REAL(NAME)(dptr, stream);                                                                          \
        PTR_FREE_BODY(dptr, REAL(NAME)(dptr, stream));                                                                \
    }
ASYNC_FREE(cuMemFreeAsync, cuStreamIsCapturing)
ASYNC_FREE(cuMemFreeAsync_ptsz, cuStreamIsCapturing_ptsz)

/* ---- imports: the exporter's memory, not charged again (hooked so the rule is explicit) ---- */
VGPU_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    HOOK_ENTER(cuIpcOpenMemHandle, dptr, handle, flags);
    return REAL(cuIpcOpenMemHandle)(dptr, handle, flags);
}

VGPU_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    HOOK_ENTER(cuIpcOpenMemHandle_v2, dptr, handle, flags);
    return REAL(cuIpcOpenMemHandle_v2)(dptr, handle, flags);
}
