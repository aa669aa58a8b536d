/* Contexts: each one is charged the configured context reserve (cfg.ctx_reserve), reported as
 * NVML's reserved memory. A created context is charged until it is destroyed; a primary
 * context from its first retain to its last release (or a reset). Never refused. */
#include <pthread.h>
#include <string.h>

#include "cuda_shim.h"

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned primary_refs[VGPU_MAX_DEVICES];

void vgpu_contexts_forget(void)
{
    memset(primary_refs, 0, sizeof primary_refs);
}

static void ctx_charge(int dev, int sign)
{
    struct vgpu_cuda_state *s = &vgpu_cuda;
    if (!s->cfg.ctx_reserve || dev < 0 || dev >= VGPU_MAX_DEVICES || s->exiting)
        return;
    if (sign > 0)
        vgpu_region_charge(s->region, &s->slot, dev, VGPU_CTX, s->cfg.ctx_reserve, 0, 0);
    else
        vgpu_region_uncharge(s->region, &s->slot, dev, VGPU_CTX, s->cfg.ctx_reserve);
}

static CUresult ctx_created(CUresult rc, CUcontext *pctx, CUdevice dev)
{
    uint64_t reserve = vgpu_cuda.cfg.ctx_reserve;
    if (rc == CUDA_SUCCESS && pctx && reserve && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        uint64_t ob;
        int od;
        if (vgpu_track_put(VGPU_K_CTX, (uint64_t)(uintptr_t)*pctx, reserve, dev, &ob, &od) == 1)
            ctx_charge(od, -1);
        ctx_charge(dev, +1);
    }
    return rc;
}

VGPU_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate)(pctx, flags, dev), pctx, dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate_v2)(pctx, flags, dev), pctx, dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int nparams, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate_v3)(pctx, params, nparams, flags, dev), pctx, dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate_v4)(pctx, params, flags, dev), pctx, dev);
}

static CUresult ctx_destroy(vgpu_fn_cuCtxDestroy *real, CUcontext ctx)
{
    uint64_t bytes;
    int dev;
    if (vgpu_track_take(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, &bytes, &dev) != 0)
        return real(ctx);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS)
        ctx_charge(dev, -1);
    else
        vgpu_track_put(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, bytes, dev, &bytes, &dev);
    return rc;
}

/* The real pointers are read once READY_OR_RETURN has loaded the library. */
VGPU_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    READY_OR_RETURN();
    return ctx_destroy(REAL(cuCtxDestroy), ctx);
}

VGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    READY_OR_RETURN();
    return ctx_destroy(REAL(cuCtxDestroy_v2), ctx);
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    READY_OR_RETURN();
    CUresult rc = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        pthread_mutex_lock(&ctx_lock);
        if (primary_refs[dev]++ == 0)
            ctx_charge(dev, +1);
        pthread_mutex_unlock(&ctx_lock);
    }
    return rc;
}

static CUresult primary_release(vgpu_fn_cuDevicePrimaryCtxRelease *real, CUdevice dev, int reset)
{
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        pthread_mutex_lock(&ctx_lock);
        if (primary_refs[dev] > 0) {
            primary_refs[dev] = reset ? 0 : primary_refs[dev] - 1;
            if (primary_refs[dev] == 0)
                ctx_charge(dev, -1);
        }
        pthread_mutex_unlock(&ctx_lock);
    }
    return rc;
}

/* The real pointer is read once READY_OR_RETURN has loaded the library. */
#define PRIMARY_RELEASE(NAME, RESET)                                                                                  \
    VGPU_EXPORT CUresult NAME(CUdevice dev)                                                                           \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        return primary_release(REAL(NAME), dev, RESET);                                                               \
    }
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease, 0)
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2, 0)
PRIMARY_RELEASE(cuDevicePrimaryCtxReset, 1)
PRIMARY_RELEASE(cuDevicePrimaryCtxReset_v2, 1)
