/* Internals shared by the CUDA shim's files (cuda_*.c): the real driver's entry points, the
 * process's configuration and region, and the accounting steps every hook is built from. */
#ifndef VGPU_CUDA_SHIM_H
#define VGPU_CUDA_SHIM_H
#include "abi.h"
#include "hooks.h"
#include "hooks_cuda.h" /* generated from hooks.def */
#include "region.h"
#include "vgpu.h"

/* H_<name>: index of every driver function named in hooks.def; hooks first, then the functions
 * only called. */
#define VGPU_H_ENUM(n) H_##n,
enum { VGPU_CUDA_HOOKS(VGPU_H_ENUM) VGPU_CUDA_CALLS(VGPU_H_ENUM) H_COUNT };
#define VGPU_ONE(n) +1
enum { N_HOOKS = 0 VGPU_CUDA_HOOKS(VGPU_ONE) };

/* Every hook is declared from its hooks.def signature, so a definition that differs fails to build. */
#define VGPU_DECLARE_HOOK(n) VGPU_EXPORT vgpu_fn_##n n;
VGPU_CUDA_HOOKS(VGPU_DECLARE_HOOK)

/* The real driver's functions; a hooked one the driver lacks answers CUDA_ERROR_NOT_SUPPORTED. */
extern VGPU_HIDDEN void *vgpu_cuda_real[H_COUNT];
extern VGPU_HIDDEN const char *const vgpu_cuda_names[H_COUNT];
#define REAL(name) ((vgpu_fn_##name *)vgpu_cuda_real[H_##name])
VGPU_HIDDEN CUresult vgpu_cuda_not_supported(void);

struct vgpu_cuda_state {
    int ready;   /* real library loaded and configuration good */
    int defer;   /* libvgpu.so is in this process too: this shim forwards everything to it */
    int cfg_ok;  /* configuration loaded and region mapped */
    int audit;   /* GPU_COMPUTE_AUDIT: launches counted in the slot */
    int exiting; /* after our destructor: no more accounting */
    int slot;    /* our slot in the region, -1 = none yet */
    struct vgpu_config cfg;
    struct vgpu_region *region;
};
extern VGPU_HIDDEN struct vgpu_cuda_state vgpu_cuda;

/* Load the real library, and the configuration, once (cuda_loader.c). */
VGPU_HIDDEN void vgpu_cuda_load_library(void);
VGPU_HIDDEN void vgpu_cuda_load(void);
VGPU_HIDDEN CUresult vgpu_cuda_ready_slow(void);
/* CUDA_SUCCESS when the hooks may work; otherwise the CUDA error to return. */
static inline CUresult vgpu_cuda_ready(void)
{
    if (__builtin_expect(__atomic_load_n(&vgpu_cuda.ready, __ATOMIC_ACQUIRE), 1))
        return CUDA_SUCCESS;
    return vgpu_cuda_ready_slow();
}
#define READY_OR_RETURN()                                                                                             \
    do {                                                                                                              \
        CUresult e_ = vgpu_cuda_ready();                                                                              \
        if (e_ != CUDA_SUCCESS)                                                                                       \
            return e_;                                                                                                \
    } while (0)
/* The start of every hook: ready, or the error; with libvgpu.so in the process too (both library
 * modes at once), this shim is a plain forward to it, so one accounting sees every call. */
#define HOOK_ENTER(NAME, ...)                                                                                         \
    do {                                                                                                              \
        READY_OR_RETURN();                                                                                            \
        if (__builtin_expect(vgpu_cuda.defer, 0))                                                                     \
            return REAL(NAME)(__VA_ARGS__);                                                                           \
    } while (0)

/* ---- accounting (cuda_account.c) ---- */
VGPU_HIDDEN int vgpu_current_device(int *dev);                            /* 0 ok, -1 no current context */
/* The current device without a driver call where the process sees one device only: 0 and *dev
 * then, whether a context is current or not (the driver's call after it fails without one, and
 * its admission is rolled back); else vgpu_current_device's answer. For the hot stream-ordered
 * pair, where cuCtxGetDevice would be a sixth of what libvgpu adds. */
extern VGPU_HIDDEN int vgpu_device_count; /* once the driver has said it (0: not yet); it does not change */
VGPU_HIDDEN int vgpu_sole_device_slow(int *dev);
static inline int vgpu_sole_device(int *dev)
{
    if (__builtin_expect(__atomic_load_n(&vgpu_device_count, __ATOMIC_RELAXED) == 1, 1)) {
        *dev = 0;
        return 0;
    }
    return vgpu_sole_device_slow(dev);
}
VGPU_HIDDEN int vgpu_admit(int dev, uint64_t bytes);                      /* 0 charged, -1 over the quota */
VGPU_HIDDEN void vgpu_rollback(int dev, uint64_t bytes);                  /* undo an admission the driver refused */
VGPU_HIDDEN void vgpu_commit(int kind, uint64_t key, uint64_t bytes, int dev); /* remember what was charged */
VGPU_HIDDEN void vgpu_released(int dev, uint64_t bytes);                  /* the driver freed a charged allocation */
/* A rise of this process's used memory by bytes (pools, graphs): admitted like an allocation,
 * 0 or -1; a fall (or, with admit 0, any change) is applied as it is. */
VGPU_HIDDEN int vgpu_adjust(int dev, int64_t bytes, int64_t buffers, int admit);
/* A measured cost (a context, a module, a limit) charged as context memory: after is what NVML
 * said after the call (it holds the bytes already), NULL when NVML cannot tell. 0 or -1. */
VGPU_HIDDEN int vgpu_admit_overhead(int dev, uint64_t bytes, const struct vgpu_truth *after);
VGPU_HIDDEN void vgpu_release_overhead(int dev, uint64_t bytes);
/* The GPU's own count (cuda_truth.c). */
VGPU_HIDDEN int vgpu_truth_usable(void);
VGPU_HIDDEN void vgpu_truth_unusable(const char *why);
VGPU_HIDDEN int vgpu_truth_read(int dev, struct vgpu_truth *out);        /* 0, or -1 NVML cannot tell */
VGPU_HIDDEN int vgpu_truth_self(const struct vgpu_truth *t, uint64_t *bytes); /* 1 listed, 0 not */

/* ---- measured calls (cuda_measure.c): the call's real cost, from NVML's count of this process ---- */
struct vgpu_measure {
    int dev, active, listed;
    uint64_t before, ledger_before;
    struct vgpu_truth after;
};
/* Begin measuring a call on dev (measured calls run one at a time in a process). */
VGPU_HIDDEN void vgpu_measure_begin(int dev, struct vgpu_measure *m);
/* The call's cost: what NVML says this process holds now minus before, minus what the ledger
 * moved meanwhile (other threads); 0 measured, -1 NVML cannot tell (cost 0). context: the call
 * made a context, so NVML must list the process now, or it cannot see it at all. */
VGPU_HIDDEN int vgpu_measure_end(struct vgpu_measure *m, int context, int64_t *cost);
VGPU_HIDDEN CUcontext vgpu_current_context(void);
/* Charges owned by a context (modules, libraries, limits) go with it. */
VGPU_HIDDEN void vgpu_overheads_forget_context(CUcontext ctx);

/* ---- stream-ordered pools (cuda_pools.c) ---- */
/* Re-read what dev's pools reserve and settle their charges (before a refusal, after a trim) */
VGPU_HIDDEN void vgpu_pools_reread(int dev);
/* A stream-ordered allocation freed (or found freed): its pool's live count lowered. */
VGPU_HIDDEN void vgpu_pool_freed(const struct vgpu_async_entry *e);

/* Common shape of "allocate bytes on dev, keyed by what the driver wrote to *out". */
#define ALLOC_BODY(KIND, OUT, BYTES, DEV, CALL)                                                                       \
    do {                                                                                                              \
        if (vgpu_admit(DEV, BYTES) != 0)                                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ != CUDA_SUCCESS) {                                                                                    \
            vgpu_rollback(DEV, BYTES);                                                                                \
            return rc_;                                                                                               \
        }                                                                                                             \
        vgpu_commit(KIND, (uint64_t)(uintptr_t)(OUT), BYTES, DEV);                                                    \
        return rc_;                                                                                                   \
    } while (0)

/* Common shape of a free: untracked keys go to the driver untouched. */
#define FREE_BODY(KIND, KEY, CALL)                                                                                    \
    do {                                                                                                              \
        uint64_t bytes_;                                                                                              \
        int dev_;                                                                                                     \
        if (vgpu_track_take(KIND, (uint64_t)(uintptr_t)(KEY), &bytes_, &dev_) != 0)                                   \
            return CALL;                                                                                              \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ == CUDA_SUCCESS)                                                                                      \
            vgpu_released(dev_, bytes_);                                                                              \
        else                                                                                                          \
            vgpu_commit(KIND, (uint64_t)(uintptr_t)(KEY), bytes_, dev_);                                              \
        return rc_;                                                                                                   \
    } while (0)

/* ---- contexts (cuda_contexts.c) ---- */
/* Whether the process has at most one context: a library's kernel can then run in that one only
 * (a second one forgets every covered launch target). */
VGPU_HIDDEN int vgpu_contexts_single(void);

/* ---- graph memory (cuda_graphs.c) ---- */
/* Every node of g, child graphs' included (16 deep at most), to visit: 0, or -1 when the driver
 * cannot list them or visit said -1. */
VGPU_HIDDEN int vgpu_graph_nodes(CUgraph g, int (*visit)(CUgraphNode node, int type, void *arg), void *arg);
/* ---- graph kernels (cuda_graph_kernels.c) ---- */
/* g's kernel nodes covered in the current context (cuda_launch.c): CUDA_SUCCESS and *stack, the
 * most local memory a thread of them needs, or CUDA_ERROR_OUT_OF_MEMORY. */
VGPU_HIDDEN CUresult vgpu_graph_kernels_cover(CUgraph g, size_t *stack);
VGPU_HIDDEN void vgpu_graph_exec_needs(CUgraphExec exec, size_t stack); /* remember what exec's launches need */
VGPU_HIDDEN void vgpu_graph_exec_gone(CUgraphExec exec);
VGPU_HIDDEN CUresult vgpu_graph_exec_cover(CUgraphExec exec); /* before a launch or an upload of exec */
extern VGPU_HIDDEN int vgpu_capture_seen; /* a stream capture began in this process */
/* Whether a stream-ordered call on stream goes into a graph being captured (asked only once a
 * capture has begun in this process: the check costs a driver call). */
static inline int vgpu_stream_captured(vgpu_fn_cuStreamIsCapturing *is_capturing, CUstream stream)
{
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (__builtin_expect(!__atomic_load_n(&vgpu_capture_seen, __ATOMIC_RELAXED), 1) || !is_capturing)
        return 0;
    return is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- launches (cuda_launch.c) ---- */
/* The local memory a thread of f needs, f being a function or a library's kernel (resolved in
 * the current context, which loads it there: measured and charged, or CUDA_ERROR_OUT_OF_MEMORY);
 * *bound (when not NULL): f is a module's function, which runs in its own context only. */
VGPU_HIDDEN CUresult vgpu_launch_local(CUfunction f, size_t *local, int *bound);
/* What a launch of f (a function or a library's kernel) would grow in the current context,
 * charged first: CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY. *local: its local memory a thread. */
VGPU_HIDDEN CUresult vgpu_launch_cover(CUfunction f, size_t *local);
VGPU_HIDDEN void vgpu_count_launch(void); /* GPU_COMPUTE_AUDIT: one more launch in our slot */

/* Launch targets already covered (cuda_launch.c): a direct-mapped table of hashed keys, read
 * without a lock (cuda_state.c holds it). A key holds the generation, so bumping it forgets every
 * target at once. */
#define VGPU_COVERED 4096 /* a power of two */
extern VGPU_HIDDEN uint64_t vgpu_covered[VGPU_COVERED];
extern VGPU_HIDDEN uint64_t vgpu_launch_generation;
/* A launch target's key: the four words, each multiplied by its own odd constant (a bijection),
 * summed and mixed once; never 0 (an empty entry). */
static inline uint64_t vgpu_target_key(const void *f, CUcontext ctx, CUstream stream)
{
    uint64_t h = (uint64_t)(uintptr_t)f * 0x9e3779b97f4a7c15ULL + (uint64_t)(uintptr_t)stream * 0xc2b2ae3d27d4eb4fULL
                 + (uint64_t)(uintptr_t)ctx * 0x165667b19e3779f9ULL
                 + __atomic_load_n(&vgpu_launch_generation, __ATOMIC_ACQUIRE) * 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    return h | 1;
}
static inline int vgpu_is_covered(uint64_t key)
{
    return __atomic_load_n(&vgpu_covered[(key >> 40) & (VGPU_COVERED - 1)], __ATOMIC_RELAXED) == key;
}
static inline void vgpu_remember_covered(uint64_t key)
{
    __atomic_store_n(&vgpu_covered[(key >> 40) & (VGPU_COVERED - 1)], key, __ATOMIC_RELAXED);
}
/* Forget which launch targets are covered (a limit lowered, a context, module or library gone). */
static inline void vgpu_launches_forget(void)
{
    __atomic_fetch_add(&vgpu_launch_generation, 1, __ATOMIC_RELEASE);
}

/* ---- limits (cuda_contexts.c) ---- */
/* The current context's per-thread stack raised to bytes if it is lower, charged before the
 * driver takes it: CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY past the quota. */
VGPU_HIDDEN CUresult vgpu_stack_at_least(size_t bytes);
/* Heaps this process set that a kernel has taken since are no longer pending (near the limit). */
VGPU_HIDDEN void vgpu_heaps_probe(int dev);

#endif
