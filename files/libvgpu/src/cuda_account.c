/* The accounting steps every allocation hook is made of: admit (charge the region before the
 * driver call), roll back (the driver failed), commit (remember the charge by pointer or handle),
 * release (the driver freed it). After our destructor nothing is accounted any more. */
#include "cuda_shim.h"

int vgpu_current_device(int *dev)
{
    CUdevice d = -1;
    if (!REAL(cuCtxGetDevice) || REAL(cuCtxGetDevice)(&d) != CUDA_SUCCESS)
        return -1;
    if (d < 0 || d >= VGPU_MAX_DEVICES)
        return -1;
    *dev = d;
    return 0;
}

int vgpu_admit(int dev, uint64_t bytes)
{
    struct vgpu_cuda_state *s = &vgpu_cuda;
    if (s->exiting)
        return 0;
    if (vgpu_region_charge(s->region, &s->slot, dev, VGPU_DATA, bytes, s->cfg.limit[dev], s->cfg.limit_enforce) == 0)
        return 0;
    vgpu_log(VGPU_INFO, "refused %llu bytes on device %d: quota %llu bytes", (unsigned long long)bytes, dev,
             (unsigned long long)s->cfg.limit[dev]);
    return -1;
}

void vgpu_rollback(int dev, uint64_t bytes)
{
    if (!vgpu_cuda.exiting)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, dev, VGPU_ROLLBACK, bytes);
}

void vgpu_commit(int kind, uint64_t key, uint64_t bytes, int dev)
{
    uint64_t old_bytes = 0;
    int old_dev = 0;
    if (vgpu_cuda.exiting)
        return;
    /* the driver reused a key we missed freeing: that old charge is gone */
    if (vgpu_track_put(kind, key, bytes, dev, &old_bytes, &old_dev) == 1)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, old_dev, VGPU_DATA, old_bytes);
}

void vgpu_released(int dev, uint64_t bytes)
{
    if (!vgpu_cuda.exiting)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, dev, VGPU_DATA, bytes);
}
