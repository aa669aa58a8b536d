/* The fake CUDA driver's graphs: what libvgpu's graph-memory accounting needs, behaving as the
 * CUDA documentation says the driver does (tests/README.md, "Graphs"):
 *  - an allocation node gets its address when it is added; its memory exists from when a launch
 *    reaches it until a free node, cuMemFree(Async) or an AUTO_FREE_ON_LAUNCH relaunch frees it;
 *  - that memory comes from a per-device graph pool that grows at launch (taking device memory,
 *    so it can fail with CUDA_ERROR_OUT_OF_MEMORY) and gives memory back only at
 *    cuDeviceGraphMemTrim; destroying a graph or an executable graph frees nothing;
 *  - a relaunch while the previous launch's allocations live fails with CUDA_ERROR_INVALID_VALUE
 *    unless instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH; a graph with memory
 *    nodes has at most one executable graph at a time;
 *  - stream capture turns cuMemAllocAsync / cuMemFreeAsync / cuMemsetD8Async into allocation,
 *    free and memset nodes;
 *  - a kernel node's function grows what its context reserves (fake_launch_grows: the stack, the
 *    heap) at instantiation, when an executable graph's node gets another function, and at a
 *    launch (after the stack limit was lowered), as on the H200 (issue 37).
 * Launches run at once, in node order (nodes are added in dependency order here). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fake_cuda.h"
#include "fake_gpu.h"

struct CUgraphNode_st {
    int type;
    int dev;
    uint64_t bytes;
    CUdeviceptr dptr;
    CUgraph child;
    int live;            /* an allocation node's memory exists now */
    unsigned char value; /* a memset node's */
    CUfunction func;     /* a kernel node's function (or CUkernel) */
};

struct CUgraph_st {
    CUgraphNode *nodes;
    size_t n, cap;
    int mem_nodes;
    int has_exec;
};

struct CUgraphExec_st {
    CUgraph graph;
    unsigned long long flags;
};

struct CUstream_st {
    int capturing;
    CUgraph graph;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUgraphNode *allocs; /* every allocation node ever made, to find one by address */
static size_t nallocs, cap_allocs;
static uint64_t reserved[FAKE_MAX_GPUS], used[FAKE_MAX_GPUS], reserved_high[FAKE_MAX_GPUS], used_high[FAKE_MAX_GPUS];

static int grow(void **array, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    void *a = realloc(*array, n * size);
    if (!a)
        return -1;
    *array = a;
    *cap = n;
    return 0;
}

static CUresult add_node(CUgraph g, CUgraphNode node, CUgraphNode *out)
{
    if (grow((void **)&g->nodes, &g->cap, g->n + 1, sizeof *g->nodes) != 0) {
        free(node);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->nodes[g->n++] = node;
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || node->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        g->mem_nodes = 1;
    if (out)
        *out = node;
    return CUDA_SUCCESS;
}

static CUgraphNode alloc_node_at(CUdeviceptr p)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i]->dptr == p)
            return allocs[i];
    return NULL;
}

/* Caller holds lock. */
static CUresult new_alloc_node(CUgraph g, uint64_t bytes, int dev, CUgraphNode *out, CUdeviceptr *dptr)
{
    if (!bytes || !fake_valid_dev(dev))
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode node = calloc(1, sizeof *node);
    if (!node || grow((void **)&allocs, &cap_allocs, nallocs + 1, sizeof *allocs) != 0) {
        free(node);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* the address, fixed now; host pages behind it only once written (after a launch) */
    void *va = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED) {
        free(node);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *node = (struct CUgraphNode_st){CU_GRAPH_NODE_TYPE_MEM_ALLOC, dev, bytes, (CUdeviceptr)(uintptr_t)va, NULL, 0, 0, NULL};
    CUresult rc = add_node(g, node, out);
    if (rc == CUDA_SUCCESS) {
        allocs[nallocs++] = node;
        *dptr = node->dptr;
    }
    return rc;
}

/* Caller holds lock. */
static CUresult new_free_node(CUgraph g, CUdeviceptr p, CUgraphNode *out)
{
    CUgraphNode node = calloc(1, sizeof *node);
    if (!node)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *node = (struct CUgraphNode_st){CU_GRAPH_NODE_TYPE_MEM_FREE, 0, 0, p, NULL, 0, 0, NULL};
    return add_node(g, node, out);
}

/* ---- building graphs ---- */
EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned flags)
{
    if (!g || flags)
        return CUDA_ERROR_INVALID_VALUE;
    *g = calloc(1, sizeof **g);
    return *g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Live graph allocations outlive their graph (the documentation says so): nodes stay known. */
EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            free(g->nodes[i]);
    free(g->nodes);
    free(g);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    (void)deps, (void)ndeps;
    if (!fake_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!node || !g || !params || params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = new_alloc_node(g, params->bytesize, params->poolProps.location.id, node, &params->dptr);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                      CUdeviceptr p)
{
    (void)deps, (void)ndeps;
    if (!node || !g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    /* only the address of an allocation node, as with the driver */
    CUresult rc = alloc_node_at(p) ? new_free_node(g, p, node) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A child graph is copied into its node; graphs with memory nodes cannot be (ownership moves
 * through cuGraphAddNode only, which this fake does not have). */
EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                         CUgraph child)
{
    (void)deps, (void)ndeps;
    if (!node || !g || !child)
        return CUDA_ERROR_INVALID_VALUE;
    if (child->mem_nodes)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUgraphNode n = calloc(1, sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *n = (struct CUgraphNode_st){CU_GRAPH_NODE_TYPE_GRAPH, 0, 0, 0, child, 0, 0, NULL};
    pthread_mutex_lock(&lock);
    CUresult rc = add_node(g, n, node);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- kernel nodes ---- */
static CUresult add_kernel_node(CUgraphNode *node, CUgraph g, CUfunction f)
{
    if (!node || !g || !f)
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode n = calloc(1, sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *n = (struct CUgraphNode_st){.type = CU_GRAPH_NODE_TYPE_KERNEL, .func = f};
    pthread_mutex_lock(&lock);
    CUresult rc = add_node(g, n, node);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    (void)deps, (void)ndeps;
    return params ? add_kernel_node(node, g, params->func) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                        const CUDA_KERNEL_NODE_PARAMS_v2 *params)
{
    (void)deps, (void)ndeps;
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    return add_kernel_node(node, g, params->func ? params->func : (CUfunction)params->kern);
}

/* A kernel node's parameters (size: the v1 or v2 struct, both starting with the function). */
static CUresult kernel_node_params(CUgraphNode node, void *params, size_t size)
{
    if (!node || !params || node->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(params, 0, size);
    memcpy(params, &node->func, sizeof node->func);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    return kernel_node_params(node, params, sizeof *params);
}

EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2 *params)
{
    return kernel_node_params(node, params, sizeof *params);
}

/* What g's kernel nodes (child graphs included) grow. Caller holds lock. */
static CUresult grow_kernels(CUgraph g)
{
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < g->n && rc == CUDA_SUCCESS; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL)
            rc = fake_launch_grows(g->nodes[i]->func);
        else if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH)
            rc = grow_kernels(g->nodes[i]->child);
    return rc;
}

/* An executable graph's kernel node given another function: its needs grow at once. */
static CUresult exec_set_kernel(CUgraphExec exec, CUgraphNode node, CUfunction f)
{
    if (!exec || !node || node->type != CU_GRAPH_NODE_TYPE_KERNEL || !f)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fake_launch_grows(f);
    if (rc == CUDA_SUCCESS)
        node->func = f;
    return rc;
}

EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                               const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    return params ? exec_set_kernel(exec, node, params->func) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS_v2 *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    return exec_set_kernel(exec, node, params->func ? params->func : (CUfunction)params->kern);
}

EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *params)
{
    if (!params || params->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_KERNEL_NODE_PARAMS_v2 *k = &params->u.kernel;
    return exec_set_kernel(exec, node, k->func ? k->func : (CUfunction)k->kern);
}

EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
    if (!g || !count)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes) {
        for (size_t i = 0; i < *count; i++)
            nodes[i] = i < g->n ? g->nodes[i] : NULL;
        if (*count > g->n)
            *count = g->n;
    } else {
        *count = g->n;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, int *type)
{
    if (!node || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    if (!node || !params || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    memset(params, 0, sizeof *params);
    params->poolProps.allocType = 1;
    params->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params->poolProps.location.id = node->dev;
    params->bytesize = node->bytes;
    params->dptr = node->dptr;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *g)
{
    if (!node || !g || node->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    *g = node->child;
    return CUDA_SUCCESS;
}

/* ---- instantiation ---- */
static CUresult instantiate(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    if (!exec || !g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (g->mem_nodes && g->has_exec)
        rc = CUDA_ERROR_NOT_SUPPORTED; /* one executable graph at a time for a graph with memory nodes */
    else if ((rc = grow_kernels(g)) != CUDA_SUCCESS)
        ;
    else if (!(*exec = calloc(1, sizeof **exec)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        (*exec)->graph = g;
        (*exec)->flags = flags;
        g->has_exec = 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    return instantiate(exec, g, flags);
}

EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
    (void)err;
    if (log && size)
        log[0] = '\0';
    return instantiate(exec, g, 0);
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(exec, g, params->flags);
    params->result_out = rc == CUDA_SUCCESS ? 0 : 1;
    return rc;
}

/* The executable graph takes another graph of the same shape (no memory nodes here): its kernel
 * nodes' functions, which grow what the context reserves at once. */
EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, void *result_info)
{
    (void)result_info;
    if (!exec || !g || g->mem_nodes || exec->graph->mem_nodes || g->n != exec->graph->n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = grow_kernels(g);
    for (size_t i = 0; i < g->n && rc == CUDA_SUCCESS; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL && exec->graph->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL)
            exec->graph->nodes[i]->func = g->nodes[i]->func;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    if (!exec)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    exec->graph->has_exec = 0;
    pthread_mutex_unlock(&lock);
    free(exec);
    return CUDA_SUCCESS;
}

/* ---- launches: the graph pool ---- */
static void note_high(int dev)
{
    if (used[dev] > used_high[dev])
        used_high[dev] = used[dev];
    if (reserved[dev] > reserved_high[dev])
        reserved_high[dev] = reserved[dev];
}

/* Caller holds lock. */
static void free_graph_alloc(CUgraphNode a)
{
    a->live = 0;
    used[a->dev] -= a->bytes;
    madvise((void *)(uintptr_t)a->dptr, a->bytes, MADV_DONTNEED); /* its contents are gone */
}

static int graph_has_live(CUgraph g)
{
    for (size_t i = 0; i < g->n; i++)
        if ((g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->live)
            || (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH && graph_has_live(g->nodes[i]->child)))
            return 1;
    return 0;
}

static void free_live(CUgraph g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->live)
            free_graph_alloc(g->nodes[i]);
        else if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH)
            free_live(g->nodes[i]->child);
}

/* Run g's memory nodes in order. Caller holds lock. */
static CUresult run(CUgraph g)
{
    for (size_t i = 0; i < g->n; i++) {
        CUgraphNode node = g->nodes[i];
        if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            int d = node->dev;
            if (used[d] + node->bytes > reserved[d]) {
                uint64_t more = used[d] + node->bytes - reserved[d];
                if (fake_device_reserve(d, more) != 0)
                    return CUDA_ERROR_OUT_OF_MEMORY;
                reserved[d] += more;
            }
            used[d] += node->bytes;
            node->live = 1;
            note_high(d);
        } else if (node->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            CUgraphNode a = alloc_node_at(node->dptr);
            if (a && a->live)
                free_graph_alloc(a);
            else if (!a)
                fake_free(node->dptr); /* a captured free of an ordinary allocation */
        } else if (node->type == CU_GRAPH_NODE_TYPE_MEMSET) {
            memset((void *)(uintptr_t)node->dptr, node->value, node->bytes);
        } else if (node->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            CUresult rc = run(node->child);
            if (rc != CUDA_SUCCESS)
                return rc;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult launch(CUgraphExec exec)
{
    if (!exec)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (graph_has_live(exec->graph)) {
        if (exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            free_live(exec->graph);
        else
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS)
        rc = grow_kernels(exec->graph);
    if (rc == CUDA_SUCCESS && (rc = run(exec->graph)) != CUDA_SUCCESS)
        free_live(exec->graph); /* out of memory part way: what this launch made goes back to the pool */
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    (void)s;
    return launch(exec);
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    (void)s;
    return launch(exec);
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    if (!fake_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    fake_device_release(dev, reserved[dev] - used[dev]);
    reserved[dev] = used[dev];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value)
{
    if (!fake_valid_dev(dev) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t v = attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT       ? used[dev]
                 : attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH         ? used_high[dev]
                 : attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? reserved[dev]
                                                                   : reserved_high[dev];
    pthread_mutex_unlock(&lock);
    if (attr < 0 || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(value, &v, sizeof v);
    return CUDA_SUCCESS;
}

/* A graph allocation freed outside its graph (cuMemFree, cuMemFreeAsync): back to the pool. */
int fake_graph_free(CUdeviceptr p, CUresult *rc)
{
    pthread_mutex_lock(&lock);
    CUgraphNode a = alloc_node_at(p);
    if (a) {
        *rc = a->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        if (a->live)
            free_graph_alloc(a);
    }
    pthread_mutex_unlock(&lock);
    return a != NULL;
}

/* ---- streams and capture ---- */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    (void)flags;
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = calloc(1, sizeof **s);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    free(s);
    return CUDA_SUCCESS;
}

/* A synchronize: stream-ordered pools give back what they keep above their thresholds. */
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    (void)s;
    fake_pools_synchronized();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    return cuStreamSynchronize(s);
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
    (void)mode;
    if (!s || s->capturing)
        return CUDA_ERROR_INVALID_VALUE; /* the legacy stream cannot be captured */
    if (cuGraphCreate(&s->graph, 0) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capturing = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamBeginCapture(CUstream s)
{
    return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!s || !g || !s->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    *g = s->graph;
    s->graph = NULL;
    s->capturing = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = s && s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status)
{
    return cuStreamIsCapturing(s, status);
}

int fake_capture_alloc(CUstream s, uint64_t bytes, int dev, CUdeviceptr *p, CUresult *rc)
{
    if (!s || !s->capturing)
        return 0;
    pthread_mutex_lock(&lock);
    *rc = p ? new_alloc_node(s->graph, bytes, dev, NULL, p) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return 1;
}

int fake_capture_memset(CUstream s, CUdeviceptr p, unsigned char value, size_t bytes, CUresult *rc)
{
    if (!s || !s->capturing)
        return 0;
    CUgraphNode node = calloc(1, sizeof *node);
    if (!node) {
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
        return 1;
    }
    *node = (struct CUgraphNode_st){CU_GRAPH_NODE_TYPE_MEMSET, 0, bytes, p, NULL, 0, value, NULL};
    pthread_mutex_lock(&lock);
    *rc = add_node(s->graph, node, NULL);
    pthread_mutex_unlock(&lock);
    return 1;
}

int fake_capture_free(CUstream s, CUdeviceptr p, CUresult *rc)
{
    if (!s || !s->capturing)
        return 0;
    pthread_mutex_lock(&lock);
    *rc = new_free_node(s->graph, p, NULL);
    pthread_mutex_unlock(&lock);
    return 1;
}
