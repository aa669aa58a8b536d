/* Measured calls (design.md, "What each path charges"): a context, a module or library load, a
 * library's first lookups and cuCtxSetLimit take device memory no argument tells. Their cost is
 * read from the GPU's own count of this process (NVML) before and after the call, minus what
 * this process's ledger moved in between (other threads' allocations, and what the pools gave back
 * if the call synchronized: their reserves are read on both sides). Measured calls run one
 * at a time in a process (a process-local mutex; never the region's lock, a PTX JIT can take
 * 100 ms), so two of them never see each other's cost. */
#include <pthread.h>
#include <stdint.h>

#include "cuda_shim.h"

static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;

void vgpu_measure_begin(int dev, struct vgpu_measure *m)
{
    pthread_mutex_lock(&serial);
    /* A call that synchronizes (cuCtxSetLimit of the stack blocks until the device's work is done)
     * lets the pools give back what they keep: the pools' reserves are read before and after, so
     * what they gave back is in the ledger's move and not taken off the call's cost. */
    vgpu_pools_reread(dev);
    m->dev = dev;
    m->active = vgpu_truth_usable() && vgpu_truth_read(dev, &m->after) == 0;
    m->listed = m->active && vgpu_truth_self(&m->after, &m->before);
    if (!m->listed)
        m->before = 0;
    m->ledger_before = vgpu_region_own_bytes(dev);
}

int vgpu_measure_end(struct vgpu_measure *m, int context, int64_t *cost)
{
    *cost = 0;
    int rc = -1;
    if (m->active && vgpu_truth_read(m->dev, &m->after) == 0) {
        uint64_t now = 0;
        int listed = vgpu_truth_self(&m->after, &now);
        if (!listed && context && !m->listed) {
            /* a process with a context holds memory: NVML does not see this one (MPS, a pid it
             * cannot map), so it cannot tell what any call costs */
            vgpu_truth_unusable("NVML does not list this process after it made a context");
        } else {
            vgpu_pools_reread(m->dev);
            uint64_t ledger_now = vgpu_region_own_bytes(m->dev);
            *cost = (int64_t)(now - m->before) - (int64_t)(ledger_now - m->ledger_before);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&serial);
    return rc;
}

CUcontext vgpu_current_context(void)
{
    CUcontext c = NULL;
    if (REAL(cuCtxGetCurrent) && REAL(cuCtxGetCurrent)(&c) != CUDA_SUCCESS)
        c = NULL;
    return c;
}

static int owned_by(const struct vgpu_track_entry *e, void *ctx)
{
    return e->aux == (uint64_t)(uintptr_t)ctx;
}

static void release_entry(const struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    vgpu_release_overhead(e->dev, e->bytes);
    if (e->flags & VGPU_F_PENDING) /* a heap no kernel took: gone with its context */
        vgpu_region_pending(vgpu_cuda.region, &vgpu_cuda.slot, e->dev, -(int64_t)e->bytes);
}

void vgpu_overheads_forget_context(CUcontext ctx)
{
    vgpu_track_drain(VGPU_K_MODULE, owned_by, ctx, release_entry);
    vgpu_track_drain(VGPU_K_LIMIT, owned_by, ctx, release_entry);
    /* a library stays loaded (context-independent); its memory in this context is gone */
    struct vgpu_track_entry e;
    while (vgpu_track_find(VGPU_K_LIBRARY, owned_by, ctx, &e) == 0) {
        struct vgpu_track_entry old;
        vgpu_track_take_entry(VGPU_K_LIBRARY, e.key, &old);
        vgpu_release_overhead(old.dev, old.bytes);
        old.bytes = 0;
        old.aux = 0;
        old.flags &= ~(VGPU_F_KERNEL_SEEN | VGPU_F_RESIDENT);
        vgpu_track_put_entry(&old, &e);
    }
}
