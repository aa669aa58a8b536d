/* Launches (design.md, "What a launch reserves"). A launch makes the driver grow what it holds
 * for the launch's context: the per-thread stack of every resident thread, up to the launched
 * function's local memory (a 64 KiB kernel: 16632 MiB on an H200, kept after the launch), and a
 * library's kernel loaded lazily into the context. Both are charged before the launch that would
 * grow them, so an over-quota launch answers CUDA_ERROR_OUT_OF_MEMORY (what the driver answers
 * when it cannot grow local memory) instead of taking the memory:
 *  - the first launch of a target (function or kernel, current context, stream) resolves a
 *    library's kernel in the launch's context through the measured cuKernelGetFunction
 *    (cuda_modules.c), asks the function's local size and raises the context's stack to it
 *    through the charged limit path (cuda_limits.c), which grows nothing if it is high enough;
 *  - later launches of a covered target cost one lookup in a table of hashed keys, read without
 *    a lock: a module's function (bound to its context) by itself, and so a library's kernel
 *    while the process has one context; with several, a kernel with the current context and
 *    the stream (it runs in whichever context launches it). The key holds a
 *    generation: a lowered stack limit, a context, module or library gone (an address may then
 *    name something else) forget every target at once.
 * Graph launches and uploads are covered by what their executable graph needs
 * (cuda_graph_kernels.c). With GPU_COMPUTE_AUDIT=1 launches are counted in the process's slot. */
#include <pthread.h>

#include "cuda_shim.h"

/* In a fork child: no context of its parent's is its own. */
__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, vgpu_launches_forget);
}

static int known(struct vgpu_track_entry *e, void *arg)
{
    (void)e, (void)arg;
    return 0;
}

void vgpu_count_launch(void)
{
    int s = vgpu_cuda.slot;
    if (vgpu_cuda.region && s >= 0 && (unsigned)s < VGPU_MAX_SLOTS)
        __atomic_fetch_add(&vgpu_cuda.region->slots[s].launches, 1, __ATOMIC_RELAXED);
}

CUresult vgpu_launch_local(CUfunction f, size_t *local, int *bound)
{
    struct vgpu_track_entry k;
    CUfunction fn = f;
    int bytes = 0, kernel = vgpu_track_with(VGPU_K_KERNEL, (uint64_t)(uintptr_t)f, known, NULL, &k) >= 0;
    if (kernel) {
        CUresult rc = cuKernelGetFunction(&fn, (CUkernel)f);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    int told = REAL(cuFuncGetAttribute)
               && REAL(cuFuncGetAttribute)(&bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn) == CUDA_SUCCESS;
    if (!told && !kernel && cuKernelGetFunction(&fn, (CUkernel)f) == CUDA_SUCCESS) {
        /* a kernel handle the runtime got past the API (cudart 12+ has private ways): the driver
         * answers cuFuncGetAttribute with CUDA_ERROR_INVALID_HANDLE for it (H200, driver 580);
         * resolved in this context like any kernel */
        kernel = 1;
        told = REAL(cuFuncGetAttribute)(&bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn) == CUDA_SUCCESS;
    }
    if (!told)
        bytes = 0;
    /* a function of a module is bound to its context; a kernel of a library runs in any */
    if (bound)
        *bound = told && !kernel;
    vgpu_log(VGPU_DEBUG, "first launch of %p: %s, local memory %d bytes a thread", (void *)f,
             kernel ? "a library's kernel" : told ? "a function" : "a handle the driver tells no local size of", bytes);
    *local = bytes > 0 ? (size_t)bytes : 0;
    return CUDA_SUCCESS;
}

/* Cover f in the current context: *local is what a thread of it needs, *bound whether f runs
 * in its own context only (NULL: not asked). */
static CUresult cover(CUfunction f, size_t *local, int *bound)
{
    *local = 0;
    if (bound)
        *bound = 0;
    if (vgpu_cuda.exiting || !f)
        return CUDA_SUCCESS;
    CUresult rc = vgpu_launch_local(f, local, bound);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        return rc;
    return rc == CUDA_SUCCESS && *local ? vgpu_stack_at_least(*local) : CUDA_SUCCESS;
}

CUresult vgpu_launch_cover(CUfunction f, size_t *local)
{
    return cover(f, local, NULL);
}

/* Cover f for a launch on stream: in the stream's context when it is not the current one. */
static CUresult cover_on(CUfunction f, CUstream stream, int *bound)
{
    CUcontext current = vgpu_current_context(), target = NULL;
    if ((uintptr_t)stream > VGPU_SPECIAL_STREAMS && REAL(cuStreamGetCtx)
        && REAL(cuStreamGetCtx)(stream, &target) != CUDA_SUCCESS)
        target = NULL;
    int pushed = target && target != current && REAL(cuCtxPushCurrent_v2) && REAL(cuCtxPopCurrent_v2)
                 && REAL(cuCtxPushCurrent_v2)(target) == CUDA_SUCCESS;
    size_t local;
    *bound = 0;
    CUresult rc = target && target != current && !pushed ? CUDA_SUCCESS : cover(f, &local, bound);
    if (pushed) {
        CUcontext popped;
        REAL(cuCtxPopCurrent_v2)(&popped);
    }
    return rc;
}

/* The first launch of a target, or one after a generation: covered, then remembered: a
 * function bound to its context by itself alone, anything else with the context and stream. */
__attribute__((noinline)) static CUresult first_launch(const void *f, CUstream stream, uint64_t bound_key)
{
    if (vgpu_cuda.audit)
        vgpu_count_launch();
    CUcontext ctx = NULL;
    REAL(cuCtxGetCurrent)(&ctx);
    uint64_t key = vgpu_target_key(f, ctx, stream);
    if (vgpu_is_covered(key))
        return CUDA_SUCCESS;
    int bound = 0;
    CUresult rc = cover_on((CUfunction)f, stream, &bound);
    if (rc == CUDA_SUCCESS) {
        /* by itself: a module's function, or any target while the process has one context */
        vgpu_remember_covered(bound || vgpu_contexts_single() ? bound_key : key);
    }
    return rc;
}

/* The check every launch makes first: CUDA_SUCCESS (launch), or the error to return. A function
 * of a module covered once costs one lookup; a library's kernel one more, with the context. */
static inline __attribute__((always_inline)) CUresult launch_check(const void *f, CUstream stream)
{
    uint64_t key = vgpu_target_key(f, NULL, NULL);
    if (__builtin_expect(!vgpu_is_covered(key), 0))
        return first_launch(f, stream, key);
    if (__builtin_expect(vgpu_cuda.audit, 0))
        vgpu_count_launch();
    return CUDA_SUCCESS;
}

#define CHECKED(F, STREAM, CALL)                                                                                      \
    do {                                                                                                              \
        CUresult rc_ = launch_check(F, STREAM);                                                                       \
        if (__builtin_expect(rc_ != CUDA_SUCCESS, 0))                                                                 \
            return rc_;                                                                                               \
        return CALL;                                                                                                  \
    } while (0)

#define LAUNCH11(NAME)                                                                                                \
    VGPU_EXPORT CUresult NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                              unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)              \
    {                                                                                                                 \
        HOOK_ENTER(NAME, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);                                    \
        CHECKED(f, stream, REAL(NAME)(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra));                      \
    }
LAUNCH11(cuLaunchKernel)
LAUNCH11(cuLaunchKernel_ptsz)

#define LAUNCH_COOP(NAME)                                                                                             \
    VGPU_EXPORT CUresult NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                              unsigned bz, unsigned shmem, CUstream stream, void **params)                            \
    {                                                                                                                 \
        HOOK_ENTER(NAME, f, gx, gy, gz, bx, by, bz, shmem, stream, params);                                           \
        CHECKED(f, stream, REAL(NAME)(f, gx, gy, gz, bx, by, bz, shmem, stream, params));                             \
    }
LAUNCH_COOP(cuLaunchCooperativeKernel)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(NAME)                                                                                               \
    VGPU_EXPORT CUresult NAME(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)                \
    {                                                                                                                 \
        HOOK_ENTER(NAME, config, f, params, extra);                                                                   \
        CHECKED(f, config ? config->hStream : NULL, REAL(NAME)(config, f, params, extra));                            \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

VGPU_EXPORT CUresult cuLaunch(CUfunction f)
{
    HOOK_ENTER(cuLaunch, f);
    CHECKED(f, NULL, REAL(cuLaunch)(f));
}

VGPU_EXPORT CUresult cuLaunchGrid(CUfunction f, int width, int height)
{
    HOOK_ENTER(cuLaunchGrid, f, width, height);
    CHECKED(f, NULL, REAL(cuLaunchGrid)(f, width, height));
}

VGPU_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int width, int height, CUstream stream)
{
    HOOK_ENTER(cuLaunchGridAsync, f, width, height, stream);
    CHECKED(f, stream, REAL(cuLaunchGridAsync)(f, width, height, stream));
}

/* One launch on several devices (deprecated, still exported): each one covered in its stream's context. */
VGPU_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags)
{
    HOOK_ENTER(cuLaunchCooperativeKernelMultiDevice, list, n, flags);
    for (unsigned i = 0; list && i < n; i++) {
        CUresult rc = launch_check(list[i].function, list[i].hStream);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return REAL(cuLaunchCooperativeKernelMultiDevice)(list, n, flags);
}
