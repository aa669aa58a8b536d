/* Contexts: each is charged what it really costs, measured (cuda_measure.c): the GPU's count of
 * this process before and after the call (518 MiB for a context on an H200 with driver 580).
 * Without a per-process figure from NVML it is charged the configured context reserve. The
 * charge counts against the quota and shows as NVML's reserved memory; a context that does not
 * fit is destroyed again and the call returns CUDA_ERROR_OUT_OF_MEMORY (so a quota smaller than
 * one context cannot run CUDA). A created context is charged until it is destroyed; a primary
 * context from its first retain to its last release (or a reset); what belongs to a context
 * (modules, limits) goes with it. Limits are cuda_limits.c's. */
#include <pthread.h>
#include <string.h>

#include "cuda_shim.h"

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static int live_contexts; /* contexts (created, or primary from first retain to last release) */

int vgpu_contexts_single(void)
{
    return __atomic_load_n(&live_contexts, __ATOMIC_ACQUIRE) <= 1;
}
static unsigned primary_refs[VGPU_MAX_DEVICES];
static CUcontext primary_ctx[VGPU_MAX_DEVICES];

/* In a fork child: it holds no context of its parent's. */
static void forget_in_child(void)
{
    memset(primary_refs, 0, sizeof primary_refs);
    memset(primary_ctx, 0, sizeof primary_ctx);
    live_contexts = 0;
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

/* After a successful creation of ctx on dev, measured by m: charge it, or 0 when it does not fit
 * (the caller undoes the creation and answers CUDA_ERROR_OUT_OF_MEMORY). */
static int charge_context(struct vgpu_measure *m, CUcontext ctx, int dev)
{
    int64_t cost;
    uint64_t bytes;
    const struct vgpu_truth *after = NULL;
    if (vgpu_measure_end(m, 1, &cost) == 0) {
        bytes = cost > 0 ? (uint64_t)cost : 0;
        after = &m->after;
    } else {
        bytes = vgpu_cuda.cfg.ctx_reserve;
    }
    if (vgpu_admit_overhead(dev, bytes, after) != 0)
        return 0;
    struct vgpu_track_entry e = {.key = (uint64_t)(uintptr_t)ctx, .bytes = bytes, .dev = dev, .kind = VGPU_K_CTX}, old;
    if (vgpu_track_put_entry(&e, &old) == 1)
        vgpu_release_overhead(old.dev, old.bytes);
    else if (__atomic_add_fetch(&live_contexts, 1, __ATOMIC_ACQ_REL) == 2)
        vgpu_launches_forget(); /* kernels covered in the only context may run in this one too */
    return 1;
}

static void context_gone(CUcontext ctx)
{
    struct vgpu_track_entry e;
    if (vgpu_track_take_entry(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, &e) == 0) {
        vgpu_release_overhead(e.dev, e.bytes);
        __atomic_sub_fetch(&live_contexts, 1, __ATOMIC_ACQ_REL);
    }
    vgpu_overheads_forget_context(ctx);
    vgpu_launches_forget(); /* a new context may come at its address */
}

static int accounted(CUdevice dev)
{
    return dev >= 0 && dev < VGPU_MAX_DEVICES && !vgpu_cuda.exiting;
}

/* The creation itself is CALL; on success *pctx is charged, or destroyed when it does not fit. */
#define CREATE(NAME, CALL)                                                                                            \
    do {                                                                                                              \
        if (!accounted(dev))                                                                                          \
            return CALL;                                                                                              \
        struct vgpu_measure m;                                                                                        \
        vgpu_measure_begin(dev, &m);                                                                                  \
        CUresult rc = CALL;                                                                                           \
        if (rc != CUDA_SUCCESS) {                                                                                     \
            int64_t ignored;                                                                                          \
            vgpu_measure_end(&m, 0, &ignored);                                                                        \
            return rc;                                                                                                \
        }                                                                                                             \
        if (pctx && !charge_context(&m, *pctx, dev)) {                                                                \
            REAL(cuCtxDestroy_v2)(*pctx);                                                                             \
            *pctx = NULL;                                                                                             \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        }                                                                                                             \
        return rc;                                                                                                    \
    } while (0)

VGPU_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    HOOK_ENTER(cuCtxCreate, pctx, flags, dev);
    CREATE(cuCtxCreate, REAL(cuCtxCreate)(pctx, flags, dev));
}

VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    HOOK_ENTER(cuCtxCreate_v2, pctx, flags, dev);
    CREATE(cuCtxCreate_v2, REAL(cuCtxCreate_v2)(pctx, flags, dev));
}

VGPU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int nparams, unsigned int flags, CUdevice dev)
{
    HOOK_ENTER(cuCtxCreate_v3, pctx, params, nparams, flags, dev);
    CREATE(cuCtxCreate_v3, REAL(cuCtxCreate_v3)(pctx, params, nparams, flags, dev));
}

VGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    HOOK_ENTER(cuCtxCreate_v4, pctx, params, flags, dev);
    CREATE(cuCtxCreate_v4, REAL(cuCtxCreate_v4)(pctx, params, flags, dev));
}

/* Green contexts (CUDA 12.4+) are contexts too. */
VGPU_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phctx, void *desc, CUdevice dev, unsigned int flags)
{
    HOOK_ENTER(cuGreenCtxCreate, phctx, desc, dev, flags);
    if (!accounted(dev))
        return REAL(cuGreenCtxCreate)(phctx, desc, dev, flags);
    struct vgpu_measure m;
    vgpu_measure_begin(dev, &m);
    CUresult rc = REAL(cuGreenCtxCreate)(phctx, desc, dev, flags);
    if (rc != CUDA_SUCCESS) {
        int64_t ignored;
        vgpu_measure_end(&m, 0, &ignored);
        return rc;
    }
    if (phctx && !charge_context(&m, (CUcontext)*phctx, dev)) {
        REAL(cuGreenCtxDestroy)(*phctx);
        *phctx = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

VGPU_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hctx)
{
    HOOK_ENTER(cuGreenCtxDestroy, hctx);
    CUresult rc = REAL(cuGreenCtxDestroy)(hctx);
    if (rc == CUDA_SUCCESS)
        context_gone((CUcontext)hctx);
    return rc;
}

static CUresult ctx_destroy(vgpu_fn_cuCtxDestroy *real, CUcontext ctx)
{
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS)
        context_gone(ctx);
    return rc;
}

/* The real pointers are read once HOOK_ENTER has loaded the library. */
VGPU_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    HOOK_ENTER(cuCtxDestroy, ctx);
    return ctx_destroy(REAL(cuCtxDestroy), ctx);
}

VGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    HOOK_ENTER(cuCtxDestroy_v2, ctx);
    return ctx_destroy(REAL(cuCtxDestroy_v2), ctx);
}

/* The first retain makes the primary context: measured and charged, or released again. */
VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    HOOK_ENTER(cuDevicePrimaryCtxRetain, pctx, dev);
    if (!accounted(dev))
        return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    pthread_mutex_lock(&primary_lock);
    int first = primary_refs[dev] == 0;
    struct vgpu_measure m;
    if (first)
        vgpu_measure_begin(dev, &m);
    CUresult rc = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (first && rc != CUDA_SUCCESS) {
        int64_t ignored;
        vgpu_measure_end(&m, 0, &ignored);
    } else if (first && !charge_context(&m, pctx ? *pctx : NULL, dev)) {
        vgpu_fn_cuDevicePrimaryCtxRelease *release =
            REAL(cuDevicePrimaryCtxRelease_v2) != (void *)vgpu_cuda_not_supported ? REAL(cuDevicePrimaryCtxRelease_v2)
                                                                                   : REAL(cuDevicePrimaryCtxRelease);
        release(dev);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (rc == CUDA_SUCCESS) {
        if (first)
            primary_ctx[dev] = pctx ? *pctx : NULL;
        primary_refs[dev]++;
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}

static CUresult primary_release(vgpu_fn_cuDevicePrimaryCtxRelease *real, CUdevice dev, int reset)
{
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS && accounted(dev)) {
        pthread_mutex_lock(&primary_lock);
        CUcontext gone = NULL;
        if (primary_refs[dev] > 0) {
            primary_refs[dev] = reset ? 0 : primary_refs[dev] - 1;
            if (primary_refs[dev] == 0)
                gone = primary_ctx[dev];
        }
        pthread_mutex_unlock(&primary_lock);
        if (gone)
            context_gone(gone);
    }
    return rc;
}

/* The real pointer is read once HOOK_ENTER has loaded the library. */
#define PRIMARY_RELEASE(NAME, RESET)                                                                                  \
    VGPU_EXPORT CUresult NAME(CUdevice dev)                                                                           \
    {                                                                                                                 \
        HOOK_ENTER(NAME, dev);                                                                                        \
        return primary_release(REAL(NAME), dev, RESET);                                                               \
    }
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease, 0)
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2, 0)
PRIMARY_RELEASE(cuDevicePrimaryCtxReset, 1)
PRIMARY_RELEASE(cuDevicePrimaryCtxReset_v2, 1)
