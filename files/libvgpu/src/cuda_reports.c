/* What the program sees (GPU_VIRTUAL_MEMORY=1 and a quota on the device): a GPU whose memory
 * is the quota. Reports saturate: never negative, never above the physical GPU. */
#include "cuda_shim.h"

/* The container's use: its ledger, and what the GPU's own count last found held beyond it. */
static uint64_t container_use(int dev)
{
    const struct vgpu_region_device *d = &vgpu_cuda.region->hdr.devices[dev];
    return __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED) + __atomic_load_n(&d->ctx_bytes, __ATOMIC_RELAXED)
           + __atomic_load_n(&vgpu_cuda.region->hdr.truth[dev].excess_bytes, __ATOMIC_RELAXED);
}

VGPU_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    HOOK_ENTER(cuMemGetInfo_v2, free_bytes, total_bytes);
    const struct vgpu_config *cfg = &vgpu_cuda.cfg;
    vgpu_fn_cuMemGetInfo_v2 *real = REAL(cuMemGetInfo_v2);
    CUresult rc = real(free_bytes, total_bytes);
    int dev;
    if (rc != CUDA_SUCCESS || !cfg->virtual_memory || vgpu_current_device(&dev) != 0 || !cfg->limit[dev])
        return rc;
    vgpu_pools_reread(dev); /* what the pools gave back at synchronizes is free again */
    size_t f = 0, t = 0;
    if (free_bytes && total_bytes) {
        f = *free_bytes;
        t = *total_bytes;
    } else if (real(&f, &t) != CUDA_SUCCESS) {
        return rc;
    }
    uint64_t total = cfg->limit[dev] < t ? cfg->limit[dev] : t;
    uint64_t used = container_use(dev);
    if (used > total)
        used = total;
    uint64_t avail = total - used;
    if (avail > f)
        avail = f; /* never more than the GPU really has free */
    if (free_bytes)
        *free_bytes = (size_t)avail;
    if (total_bytes)
        *total_bytes = (size_t)total;
    return rc;
}

VGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    HOOK_ENTER(cuDeviceTotalMem_v2, bytes, dev);
    const struct vgpu_config *cfg = &vgpu_cuda.cfg;
    CUresult rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes && cfg->virtual_memory && dev >= 0 && dev < VGPU_MAX_DEVICES && cfg->limit[dev]
        && cfg->limit[dev] < *bytes)
        *bytes = (size_t)cfg->limit[dev];
    return rc;
}
