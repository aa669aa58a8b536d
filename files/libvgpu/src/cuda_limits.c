/* Context limits that take device memory (design.md, "What a launch reserves"), each charged
 * before the driver takes it:
 *  - the per-thread stack (CU_LIMIT_STACK_SIZE): the driver reserves it for every thread the GPU
 *    can hold resident, at cuCtxSetLimit and again at any launch whose function needs more
 *    local memory. On the H200 a rise costs exactly (new - old) x 132 SMs x 2048 threads (64 KiB
 *    a thread: 16632 MiB above the default 1 KiB). A rise is admitted at that prediction (the
 *    device's own SM and thread counts) before the call, then settled to what NVML saw the call
 *    take; a fall gives back. Launches raise it here first (vgpu_stack_at_least), so that they
 *    grow nothing themselves.
 *  - the device heap (CU_LIMIT_MALLOC_HEAP_SIZE): nothing at the call, its size plus 2 MiB at the
 *    first launch of a kernel that calls malloc, after which the driver refuses to change it.
 *    Charged that much when it is set.
 * Other limits take no device memory at the call (the printf FIFO is host memory: 2 GiB took
 * none on the H200); their cost is measured as before. Limit changes run one at a time in a
 * process. */
#include <pthread.h>

#include "cuda_shim.h"

#define HEAP_EXTRA (2ULL << 20) /* what the driver takes with the heap (H200, driver 580) */

static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;
static uint64_t resident[VGPU_MAX_DEVICES]; /* threads the device holds resident; 0: not known yet */

/* Threads dev can hold resident at once (SMs x threads an SM), 0 when the driver cannot say. */
static uint64_t resident_threads(int dev)
{
    CUdevice d;
    int sms = 0, per_sm = 0;
    if (!resident[dev] && REAL(cuDeviceGetAttribute) && REAL(cuDeviceGet)(&d, dev) == CUDA_SUCCESS
        && REAL(cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) == CUDA_SUCCESS
        && REAL(cuDeviceGetAttribute)(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d) == CUDA_SUCCESS
        && sms > 0 && per_sm > 0)
        resident[dev] = (uint64_t)sms * (uint64_t)per_sm;
    return resident[dev];
}

/* What setting limit from old to value changes the charge by, as known before the call
 * (charged: what the limit holds charged now). */
static int64_t predicted(int dev, int limit, size_t old, size_t value, uint64_t charged)
{
    if (limit == CU_LIMIT_STACK_SIZE)
        return ((int64_t)value - (int64_t)old) * (int64_t)resident_threads(dev);
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
        return (int64_t)(value + HEAP_EXTRA) - (int64_t)charged;
    return 0;
}

/* Set limit of the current context ctx on dev to value, charged: a rise is admitted before the
 * driver call and settled after it. Caller holds serial. */
static CUresult set_limit_locked(CUcontext ctx, int dev, int limit, size_t value)
{
    size_t old = 0;
    int known = REAL(cuCtxGetLimit) && REAL(cuCtxGetLimit)(&old, limit) == CUDA_SUCCESS;
    uint64_t key = (uint64_t)(uintptr_t)ctx | (uint64_t)limit;
    struct vgpu_track_entry e = {.key = key, .aux = (uint64_t)(uintptr_t)ctx, .dev = dev, .kind = VGPU_K_LIMIT}, old_e;
    if (vgpu_track_take_entry(VGPU_K_LIMIT, key, &old_e) == 0) {
        e.bytes = old_e.bytes;
        e.flags = old_e.flags;
    }
    uint64_t charged_before = e.bytes;
    int64_t guess = known ? predicted(dev, limit, old, value, e.bytes) : 0;
    int64_t admitted = guess > 0 ? guess : 0;
    CUresult rc = CUDA_SUCCESS;
    if (admitted && vgpu_admit_overhead(dev, (uint64_t)admitted, NULL) != 0) {
        admitted = 0;
        rc = CUDA_ERROR_OUT_OF_MEMORY; /* refused before the driver took anything */
    }
    struct vgpu_measure m;
    int64_t actual = 0;
    int measured = 0;
    if (rc == CUDA_SUCCESS) {
        vgpu_measure_begin(dev, &m);
        rc = REAL(cuCtxSetLimit)(limit, value);
        measured = vgpu_measure_end(&m, 0, &actual) == 0;
        if (limit == CU_LIMIT_MALLOC_HEAP_SIZE || (!measured && limit == CU_LIMIT_STACK_SIZE))
            actual = guess; /* the heap is taken later; without NVML the prediction stands */
        if (rc == CUDA_SUCCESS && actual > admitted
            && vgpu_admit_overhead(dev, (uint64_t)(actual - admitted), measured ? &m.after : NULL) != 0) {
            if (known) /* it took more than predicted, past the quota: undone */
                REAL(cuCtxSetLimit)(limit, old);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        vgpu_release_overhead(dev, (uint64_t)admitted);
    } else {
        if (admitted > actual)
            vgpu_release_overhead(dev, (uint64_t)(admitted - (actual > 0 ? actual : 0)));
        if (actual < 0) { /* a smaller limit gave memory back */
            uint64_t down = (uint64_t)-actual < e.bytes ? (uint64_t)-actual : e.bytes;
            vgpu_release_overhead(dev, down);
            e.bytes -= down;
        } else {
            e.bytes += (uint64_t)actual;
        }
    }
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE && rc == CUDA_SUCCESS) {
        /* set, so not taken yet (the driver refuses a heap size once a kernel used the heap) */
        vgpu_region_pending(vgpu_cuda.region, &vgpu_cuda.slot, dev,
                            (int64_t)e.bytes - (int64_t)((e.flags & VGPU_F_PENDING) ? charged_before : 0));
        e.flags |= VGPU_F_PENDING;
    }
    if (e.bytes)
        vgpu_track_put_entry(&e, &old_e);
    vgpu_log(VGPU_DEBUG, "limit %d: %zu -> %zu bytes: predicted %lld, admitted %lld, took %lld (%s), charged %llu, rc %d",
             limit, old, value, (long long)guess, (long long)admitted, (long long)actual,
             measured ? "measured" : "not measured", (unsigned long long)e.bytes, rc);
    return rc;
}

/* Probing the heaps this process set and no kernel took yet (VGPU_F_PENDING): which ones, on dev. */
struct probe {
    int dev;
    unsigned n;
    uint64_t seen[16];
};

static int pending_heap(const struct vgpu_track_entry *e, void *arg)
{
    const struct probe *p = arg;
    if (!(e->flags & VGPU_F_PENDING) || e->dev != p->dev || (e->key & 7) != CU_LIMIT_MALLOC_HEAP_SIZE)
        return 0;
    for (unsigned i = 0; i < p->n; i++)
        if (p->seen[i] == e->key)
            return 0;
    return 1;
}

static int taken(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->flags &= ~VGPU_F_PENDING;
    return 0;
}

/* Whether ctx's device heap was taken: the driver then refuses to set its size again
 * (CUDA_ERROR_INVALID_VALUE on the H200, driver 580). Before, a size set takes nothing, so the
 * probe asks for a little more and sets the size back: what an equal size answers once the heap
 * is taken is not documented. */
static int heap_taken(CUcontext ctx)
{
    int pushed = 0;
    if (ctx != vgpu_current_context()) {
        if (!REAL(cuCtxPushCurrent_v2) || !REAL(cuCtxPopCurrent_v2) || REAL(cuCtxPushCurrent_v2)(ctx) != CUDA_SUCCESS)
            return 0;
        pushed = 1;
    }
    size_t size = 0;
    int gone = 0;
    if (REAL(cuCtxGetLimit)(&size, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS) {
        CUresult rc = REAL(cuCtxSetLimit)(CU_LIMIT_MALLOC_HEAP_SIZE, size + HEAP_EXTRA);
        gone = rc == CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS)
            REAL(cuCtxSetLimit)(CU_LIMIT_MALLOC_HEAP_SIZE, size);
    }
    CUcontext popped;
    if (pushed)
        REAL(cuCtxPopCurrent_v2)(&popped);
    return gone;
}

void vgpu_heaps_probe(int dev)
{
    /* a limit change of this process under way (its admission may be what called here): the
     * pending heaps stay counted, which errs on the side of the quota */
    if (vgpu_cuda.exiting || !vgpu_region_own_pending(dev) || !REAL(cuCtxGetLimit)
        || pthread_mutex_trylock(&serial) != 0)
        return;
    struct probe p = {.dev = dev};
    struct vgpu_track_entry e;
    while (p.n < 16 && vgpu_track_find(VGPU_K_LIMIT, pending_heap, &p, &e) == 0) {
        p.seen[p.n++] = e.key;
        if (heap_taken((CUcontext)(uintptr_t)e.aux) && vgpu_track_with(VGPU_K_LIMIT, e.key, taken, NULL, NULL) == 0) {
            vgpu_log(VGPU_DEBUG, "the device heap of context %p was taken: %llu bytes no longer pending",
                     (void *)(uintptr_t)e.aux, (unsigned long long)e.bytes);
            vgpu_region_pending(vgpu_cuda.region, &vgpu_cuda.slot, dev, -(int64_t)e.bytes);
        }
    }
    pthread_mutex_unlock(&serial);
}

CUresult vgpu_stack_at_least(size_t bytes)
{
    int dev;
    CUcontext ctx = vgpu_current_context();
    if (vgpu_cuda.exiting || !ctx || vgpu_current_device(&dev) != 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&serial);
    size_t now = 0;
    CUresult rc = CUDA_SUCCESS;
    if (REAL(cuCtxGetLimit) && REAL(cuCtxGetLimit)(&now, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && bytes > now)
        rc = set_limit_locked(ctx, dev, CU_LIMIT_STACK_SIZE, bytes);
    pthread_mutex_unlock(&serial);
    /* any other error (a size the device cannot give) is the launch's to report */
    return rc == CUDA_ERROR_OUT_OF_MEMORY ? rc : CUDA_SUCCESS;
}

VGPU_EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
    HOOK_ENTER(cuCtxSetLimit, limit, value);
    int dev;
    CUcontext ctx = vgpu_current_context();
    if (vgpu_cuda.exiting || !ctx || vgpu_current_device(&dev) != 0 || limit < 0 || limit > 7)
        return REAL(cuCtxSetLimit)(limit, value);
    pthread_mutex_lock(&serial);
    size_t before = 0;
    int lowered = limit == CU_LIMIT_STACK_SIZE && REAL(cuCtxGetLimit)
                  && REAL(cuCtxGetLimit)(&before, limit) == CUDA_SUCCESS && value < before;
    CUresult rc = set_limit_locked(ctx, dev, limit, value);
    pthread_mutex_unlock(&serial);
    if (rc == CUDA_SUCCESS && lowered)
        vgpu_launches_forget(); /* launches covered by the old stack may grow it again */
    return rc;
}
