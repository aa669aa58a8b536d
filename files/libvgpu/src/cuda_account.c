/* The accounting steps every hook is made of: admit (charge the region before the driver call),
 * roll back (the driver failed), commit (remember the charge by pointer or handle), release (the
 * driver freed it). Admission is the invariant's (design.md): far from the limit the ledger alone
 * decides; near it, and before any refusal, the pools are re-read and the GPU's own count (NVML)
 * of the container's processes is asked. After our destructor nothing is accounted any more. */
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

int vgpu_device_count;

int vgpu_sole_device_slow(int *dev)
{
    int n = __atomic_load_n(&vgpu_device_count, __ATOMIC_RELAXED);
    if (n == 0) {
        if (!REAL(cuDeviceGetCount) || REAL(cuDeviceGetCount)(&n) != CUDA_SUCCESS || n < 1)
            return vgpu_current_device(dev);
        __atomic_store_n(&vgpu_device_count, n, __ATOMIC_RELAXED);
    }
    if (n == 1) {
        *dev = 0;
        return 0;
    }
    return vgpu_current_device(dev);
}

/* One rise through the region: a charge of kind, or an adjust (kind -1). */
struct rise {
    int dev, kind;
    uint64_t bytes;
    int64_t adjust, buffers;
};

static int apply(const struct rise *r, const struct vgpu_limit *lim)
{
    struct vgpu_cuda_state *s = &vgpu_cuda;
    if (r->kind < 0)
        return vgpu_region_adjust(s->region, &s->slot, r->dev, r->adjust, r->buffers, lim);
    return vgpu_region_charge(s->region, &s->slot, r->dev, r->kind, r->bytes, lim);
}

/* The ledger first; when that is not enough (near the limit, or over it), the pools' reserves
 * read again and the GPU's own count asked, then the last word. given: a count read already
 * (a measured call's, which holds the bytes). */
static int admit_rise(const struct rise *r, const struct vgpu_truth *given)
{
    struct vgpu_cuda_state *s = &vgpu_cuda;
    struct vgpu_limit lim = {s->cfg.limit[r->dev], s->cfg.limit_enforce, s->cfg.ctx_reserve, given, given != NULL, 0};
    int rc = apply(r, &lim);
    if (rc == 0)
        return 0;
    vgpu_pools_reread(r->dev);
    vgpu_heaps_probe(r->dev);
    struct vgpu_truth t;
    if (!given && vgpu_truth_read(r->dev, &t) == 0)
        lim.truth = &t;
    lim.final = 1;
    if (apply(r, &lim) == 0) {
        vgpu_log(VGPU_DEBUG, "admitted %llu bytes on device %d near the limit (%s)", (unsigned long long)r->bytes,
                 r->dev, lim.truth ? "with the GPU's own count" : "NVML cannot tell: the ledger alone");
        return 0;
    }
    vgpu_log(VGPU_INFO, "refused %llu bytes on device %d: quota %llu bytes", (unsigned long long)r->bytes, r->dev,
             (unsigned long long)s->cfg.limit[r->dev]);
    return -1;
}

int vgpu_admit(int dev, uint64_t bytes)
{
    if (vgpu_cuda.exiting)
        return 0;
    struct rise r = {dev, VGPU_DATA, bytes, 0, 0};
    return admit_rise(&r, NULL);
}

int vgpu_adjust(int dev, int64_t bytes, int64_t buffers, int admit)
{
    struct vgpu_cuda_state *s = &vgpu_cuda;
    if (s->exiting || (!bytes && !buffers))
        return 0;
    struct rise r = {dev, -1, bytes > 0 ? (uint64_t)bytes : 0, bytes, buffers};
    if (admit && bytes > 0)
        return admit_rise(&r, NULL);
    return vgpu_region_adjust(s->region, &s->slot, dev, bytes, buffers, NULL);
}

int vgpu_admit_overhead(int dev, uint64_t bytes, const struct vgpu_truth *after)
{
    if (vgpu_cuda.exiting || !bytes)
        return 0;
    struct rise r = {dev, VGPU_CTX, bytes, 0, 0};
    return admit_rise(&r, after);
}

void vgpu_release_overhead(int dev, uint64_t bytes)
{
    if (!vgpu_cuda.exiting && bytes)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, dev, VGPU_CTX, bytes);
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
    /* the driver reused an address whose stream-ordered free we missed: that allocation is gone */
    struct vgpu_async_entry gone;
    if (kind == VGPU_K_PTR && vgpu_async_take(key, &gone) == 0)
        vgpu_pool_freed(&gone);
    /* the driver reused a key we missed freeing: that old charge is gone */
    if (vgpu_track_put(kind, key, bytes, dev, &old_bytes, &old_dev) == 1)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, old_dev, VGPU_DATA, old_bytes);
}

void vgpu_released(int dev, uint64_t bytes)
{
    if (!vgpu_cuda.exiting)
        vgpu_region_uncharge(vgpu_cuda.region, &vgpu_cuda.slot, dev, VGPU_DATA, bytes);
}
