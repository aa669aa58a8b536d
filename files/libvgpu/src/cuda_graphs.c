/* Graph memory (docs/design.md, "Graph memory"). The driver backs a graph's allocation nodes
 * with physical memory when the executable graph is launched (or uploaded), from a per-device
 * graph pool that keeps it after the graph frees it, after the executable graph is destroyed,
 * until cuDeviceGraphMemTrim. libvgpu charges each executable graph the sum of its allocation
 * nodes at instantiation, so a graph that would pass the quota is refused before the driver
 * maps anything, and launches stay plain forwards. The charge is held while the executable
 * graph lives; after a destroy or a trim the driver's own count of what its graph pool still
 * reserves (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) decides what stays charged beyond the
 * live executable graphs.
 *
 * cuMemAllocAsync during stream capture becomes an allocation node: it is charged when captured
 * like any allocation (an over-quota capture fails at once), and that charge turns into the
 * graph's at instantiation (found by the node's address), so nothing is counted twice. A
 * stream-ordered free captured into a graph happens when the graph runs, so capture leaves the
 * charge in place. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"

int vgpu_capture_seen;

struct taken {
    uint64_t key, bytes;
    int dev;
};

/* What instantiating a graph charges: its allocation nodes per device, and which of them were
 * charged already as captured allocations. */
struct plan {
    int any;
    uint64_t bytes[VGPU_MAX_DEVICES];
    uint64_t taken_bytes[VGPU_MAX_DEVICES];
    int64_t taken_count[VGPU_MAX_DEVICES];
    struct taken *taken;
    size_t ntaken, cap;
};

struct exec_charge {
    CUgraphExec exec;
    uint64_t bytes[VGPU_MAX_DEVICES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct exec_charge *execs;
static size_t nexecs, cap_execs;
static uint64_t live[VGPU_MAX_DEVICES];     /* the live executable graphs' allocation nodes */
static uint64_t retained[VGPU_MAX_DEVICES]; /* what the graph pool reserves beyond them, as last read */

/* In a fork child: no graph is its own. */
static void forget_in_child(void)
{
    free(execs);
    execs = NULL;
    nexecs = cap_execs = 0;
    memset(live, 0, sizeof live);
    memset(retained, 0, sizeof retained);
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

static int remember_taken(struct plan *p, uint64_t key, uint64_t bytes, int dev)
{
    if (p->ntaken == p->cap) {
        size_t n = p->cap ? p->cap * 2 : 16;
        struct taken *t = realloc(p->taken, n * sizeof *t);
        if (!t)
            return -1;
        p->taken = t;
        p->cap = n;
    }
    p->taken[p->ntaken++] = (struct taken){key, bytes, dev};
    p->taken_bytes[dev] += bytes;
    p->taken_count[dev]++;
    return 0;
}

/* Put captured allocations back as they were (the graph was not instantiated after all). */
static void give_back_taken(struct plan *p)
{
    for (size_t i = 0; i < p->ntaken; i++)
        vgpu_commit(VGPU_K_PTR, p->taken[i].key, p->taken[i].bytes, p->taken[i].dev);
    p->ntaken = 0;
    memset(p->taken_bytes, 0, sizeof p->taken_bytes);
    memset(p->taken_count, 0, sizeof p->taken_count);
}


/* An allocation node goes into p; one whose address is a charged allocation (captured) is taken
 * out of the table. */
static int plan_node(CUgraphNode node, int type, void *arg)
{
    struct plan *p = arg;
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return 0;
    CUDA_MEM_ALLOC_NODE_PARAMS a;
    memset(&a, 0, sizeof a);
    if (!REAL(cuGraphMemAllocNodeGetParams) || REAL(cuGraphMemAllocNodeGetParams)(node, &a) != CUDA_SUCCESS)
        return -1;
    int dev = a.poolProps.location.id;
    if (a.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || dev < 0 || dev >= VGPU_MAX_DEVICES)
        return 0; /* host memory does not count */
    p->any = 1;
    p->bytes[dev] += a.bytesize;
    uint64_t bytes;
    int tdev;
    if (vgpu_track_take(VGPU_K_PTR, a.dptr, &bytes, &tdev) == 0 && remember_taken(p, a.dptr, bytes, tdev) != 0) {
        vgpu_commit(VGPU_K_PTR, a.dptr, bytes, tdev);
        return -1;
    }
    return 0;
}

/* Add graph g's allocation nodes (child graphs included) to p; 0, or -1 when the driver cannot
 * list them. */
static int walk(CUgraph g, struct plan *p)
{
    return vgpu_graph_nodes(g, plan_node, p);
}

static void plan_free(struct plan *p)
{
    free(p->taken);
    p->taken = NULL;
}

/* Undo the admission of devices [0, upto) of p. Caller holds lock. */
static void unadmit_locked(struct plan *p, int upto)
{
    for (int d = 0; d < upto; d++) {
        if (!p->bytes[d] && !p->taken_count[d])
            continue;
        live[d] -= p->bytes[d];
        vgpu_adjust(d, -(int64_t)(p->bytes[d] - p->taken_bytes[d]), p->taken_count[d], 0);
    }
}

/* Charge what instantiating g will hold: CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY past a quota. */
static CUresult admit(CUgraph g, struct plan *p)
{
    memset(p, 0, sizeof *p);
    if (vgpu_cuda.exiting)
        return CUDA_SUCCESS;
    if (walk(g, p) != 0) {
        /* a graph the driver cannot list: its instantiation will say why */
        give_back_taken(p);
        p->any = 0;
        return CUDA_SUCCESS;
    }
    if (!p->any)
        return CUDA_SUCCESS;
    const struct vgpu_config *cfg = &vgpu_cuda.cfg;
    pthread_mutex_lock(&lock);
    for (int d = 0; d < VGPU_MAX_DEVICES; d++) {
        if (!p->bytes[d] && !p->taken_count[d])
            continue;
        int64_t delta = (int64_t)(p->bytes[d] - p->taken_bytes[d]);
        if (vgpu_adjust(d, delta, -p->taken_count[d], 1) != 0) {
            unadmit_locked(p, d);
            pthread_mutex_unlock(&lock);
            vgpu_log(VGPU_INFO, "refused a graph of %llu bytes on device %d: quota %llu bytes",
                     (unsigned long long)p->bytes[d], d, (unsigned long long)cfg->limit[d]);
            give_back_taken(p);
            plan_free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        live[d] += p->bytes[d];
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Remember an executable graph's charge; -1 when out of memory. Caller holds lock. */
static int add_exec_locked(const struct exec_charge *e)
{
    if (nexecs == cap_execs) {
        size_t n = cap_execs ? cap_execs * 2 : 16;
        struct exec_charge *t = realloc(execs, n * sizeof *t);
        if (!t)
            return -1;
        execs = t;
        cap_execs = n;
    }
    execs[nexecs++] = *e;
    return 0;
}

/* After the driver's instantiation: keep the charge with the executable graph, or undo it. */
static CUresult instantiated(CUresult rc, CUgraphExec *exec, struct plan *p)
{
    if (p->any) {
        struct exec_charge e = {.exec = exec ? *exec : NULL};
        memcpy(e.bytes, p->bytes, sizeof e.bytes);
        pthread_mutex_lock(&lock);
        int kept = rc == CUDA_SUCCESS && e.exec && add_exec_locked(&e) == 0;
        if (!kept) /* failed, or no room to remember it (then it is not charged: logged) */
            unadmit_locked(p, VGPU_MAX_DEVICES);
        pthread_mutex_unlock(&lock);
        if (!kept && rc == CUDA_SUCCESS)
            vgpu_log(VGPU_WARN, "out of memory to remember an executable graph: its memory is not counted");
        if (!kept)
            give_back_taken(p);
    }
    plan_free(p);
    return rc;
}

/* The driver's graph pool on device dev, as it says; -1 when it cannot say. */
static int pool_reserved(int dev, uint64_t *bytes)
{
    CUdevice h;
    unsigned long long v = 0;
    if (!REAL(cuDeviceGetGraphMemAttribute) || !REAL(cuDeviceGet) || REAL(cuDeviceGet)(&h, dev) != CUDA_SUCCESS
        || REAL(cuDeviceGetGraphMemAttribute)(h, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return -1;
    *bytes = v;
    return 0;
}

/* Charge dev for the live executable graphs plus what the pool reserves beyond them, after
 * live changed by live_change (already applied). Caller holds lock. */
static void resync_locked(int dev, int64_t live_change)
{
    uint64_t reserved, now;
    if (pool_reserved(dev, &reserved) != 0)
        now = retained[dev] + (live_change < 0 ? (uint64_t)-live_change : 0); /* cannot tell: keep it all */
    else
        now = reserved > live[dev] ? reserved - live[dev] : 0;
    int64_t delta = live_change + (int64_t)(now - retained[dev]);
    retained[dev] = now;
    if (delta)
        vgpu_adjust(dev, delta, 0, 0);
}

/* ---- instantiation: charge first (what its kernels make the driver reserve, then its memory
 * nodes), then the driver's instantiation of any ABI ---- */
#define INSTANTIATE(CALL)                                                                                             \
    do {                                                                                                              \
        struct plan p_;                                                                                               \
        size_t stack_;                                                                                                \
        CUresult rc_ = vgpu_graph_kernels_cover(graph, &stack_);                                                      \
        if (rc_ == CUDA_SUCCESS)                                                                                      \
            rc_ = admit(graph, &p_);                                                                                  \
        if (rc_ != CUDA_SUCCESS)                                                                                      \
            return rc_;                                                                                               \
        rc_ = instantiated(CALL, exec, &p_);                                                                          \
        if (rc_ == CUDA_SUCCESS && exec)                                                                              \
            vgpu_graph_exec_needs(*exec, stack_);                                                                     \
        return rc_;                                                                                                   \
    } while (0)

VGPU_EXPORT CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node, char *log,
                                        size_t log_size)
{
    HOOK_ENTER(cuGraphInstantiate, exec, graph, err_node, log, log_size);
    INSTANTIATE(REAL(cuGraphInstantiate)(exec, graph, err_node, log, log_size));
}

VGPU_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node, char *log,
                                           size_t log_size)
{
    HOOK_ENTER(cuGraphInstantiate_v2, exec, graph, err_node, log, log_size);
    INSTANTIATE(REAL(cuGraphInstantiate_v2)(exec, graph, err_node, log, log_size));
}

VGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    HOOK_ENTER(cuGraphInstantiateWithFlags, exec, graph, flags);
    INSTANTIATE(REAL(cuGraphInstantiateWithFlags)(exec, graph, flags));
}

VGPU_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    HOOK_ENTER(cuGraphInstantiateWithParams, exec, graph, params);
    INSTANTIATE(REAL(cuGraphInstantiateWithParams)(exec, graph, params));
}

VGPU_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    HOOK_ENTER(cuGraphInstantiateWithParams_ptsz, exec, graph, params);
    INSTANTIATE(REAL(cuGraphInstantiateWithParams_ptsz)(exec, graph, params));
}

/* ---- release ---- */
VGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    HOOK_ENTER(cuGraphExecDestroy, exec);
    struct exec_charge e = {0};
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nexecs && !e.exec; i++)
        if (execs[i].exec == exec) {
            e = execs[i];
            execs[i] = execs[--nexecs];
        }
    pthread_mutex_unlock(&lock);
    CUresult rc = REAL(cuGraphExecDestroy)(exec);
    if (rc == CUDA_SUCCESS)
        vgpu_graph_exec_gone(exec);
    if (!e.exec || vgpu_cuda.exiting)
        return rc;
    pthread_mutex_lock(&lock);
    if (rc != CUDA_SUCCESS) {
        if (add_exec_locked(&e) != 0) /* still there, but cannot be remembered: let it go */
            for (int d = 0; d < VGPU_MAX_DEVICES; d++)
                if (e.bytes[d]) {
                    live[d] -= e.bytes[d];
                    resync_locked(d, -(int64_t)e.bytes[d]);
                }
    } else {
        for (int d = 0; d < VGPU_MAX_DEVICES; d++)
            if (e.bytes[d]) {
                live[d] -= e.bytes[d];
                resync_locked(d, -(int64_t)e.bytes[d]);
            }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

VGPU_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    HOOK_ENTER(cuDeviceGraphMemTrim, dev);
    CUresult rc = REAL(cuDeviceGraphMemTrim)(dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < VGPU_MAX_DEVICES && !vgpu_cuda.exiting) {
        pthread_mutex_lock(&lock);
        resync_locked(dev, 0);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

/* A graph destroyed without ever being instantiated: its captured allocations never come to be. */
VGPU_EXPORT CUresult cuGraphDestroy(CUgraph graph)
{
    HOOK_ENTER(cuGraphDestroy, graph);
    struct plan p;
    memset(&p, 0, sizeof p);
    if (vgpu_cuda.exiting || walk(graph, &p) != 0) {
        give_back_taken(&p);
        plan_free(&p);
        return REAL(cuGraphDestroy)(graph);
    }
    CUresult rc = REAL(cuGraphDestroy)(graph);
    if (rc != CUDA_SUCCESS)
        give_back_taken(&p);
    for (size_t i = 0; i < p.ntaken; i++)
        vgpu_released(p.taken[i].dev, p.taken[i].bytes);
    plan_free(&p);
    return rc;
}

/* ---- capture: from the first one on, stream-ordered frees ask whether they are captured ---- */
static void capture_begins(void)
{
    __atomic_store_n(&vgpu_capture_seen, 1, __ATOMIC_RELAXED);
}

VGPU_EXPORT CUresult cuStreamBeginCapture(CUstream stream)
{
    HOOK_ENTER(cuStreamBeginCapture, stream);
    capture_begins();
    return REAL(cuStreamBeginCapture)(stream);
}

VGPU_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream)
{
    HOOK_ENTER(cuStreamBeginCapture_ptsz, stream);
    capture_begins();
    return REAL(cuStreamBeginCapture_ptsz)(stream);
}

VGPU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, int mode)
{
    HOOK_ENTER(cuStreamBeginCapture_v2, stream, mode);
    capture_begins();
    return REAL(cuStreamBeginCapture_v2)(stream, mode);
}

VGPU_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, int mode)
{
    HOOK_ENTER(cuStreamBeginCapture_v2_ptsz, stream, mode);
    capture_begins();
    return REAL(cuStreamBeginCapture_v2_ptsz)(stream, mode);
}

VGPU_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                 const void *dep_data, size_t ndeps, int mode)
{
    HOOK_ENTER(cuStreamBeginCaptureToGraph, stream, graph, deps, dep_data, ndeps, mode);
    capture_begins();
    return REAL(cuStreamBeginCaptureToGraph)(stream, graph, deps, dep_data, ndeps, mode);
}

VGPU_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                      const void *dep_data, size_t ndeps, int mode)
{
    HOOK_ENTER(cuStreamBeginCaptureToGraph_ptsz, stream, graph, deps, dep_data, ndeps, mode);
    capture_begins();
    return REAL(cuStreamBeginCaptureToGraph_ptsz)(stream, graph, deps, dep_data, ndeps, mode);
}
