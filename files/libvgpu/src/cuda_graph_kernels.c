/* Graph kernels (design.md, "What a launch reserves"). Instantiating a graph makes the driver grow
 * its context's per-thread stack to the largest local memory of the graph's kernel nodes (on the
 * H200: all of it at cuGraphInstantiate, nothing more at upload or launch), so the kernel nodes
 * are covered before the instantiation, as launches are (cuda_launch.c). An executable graph
 * remembers what its kernels need, so that a launch or an upload after the stack limit was
 * lowered raises it again first; a node given another kernel (cuGraphExecKernelNodeSetParams,
 * cuGraphExecNodeSetParams) or a whole graph (cuGraphExecUpdate) is covered before the driver
 * takes it. Conditional nodes' body graphs are not walked (design.md, "Known limits"). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"

struct need {
    CUgraphExec exec;
    size_t stack;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct need *needs;
static size_t nneeds, cap;

struct cover {
    size_t stack;
    CUresult rc;
};

static CUfunction node_function(CUgraphNode node)
{
    CUDA_KERNEL_NODE_PARAMS_v2 p2;
    CUDA_KERNEL_NODE_PARAMS_v1 p1;
    memset(&p2, 0, sizeof p2);
    memset(&p1, 0, sizeof p1);
    if (REAL(cuGraphKernelNodeGetParams_v2) && REAL(cuGraphKernelNodeGetParams_v2)(node, &p2) == CUDA_SUCCESS)
        return p2.func ? p2.func : (CUfunction)p2.kern;
    if (REAL(cuGraphKernelNodeGetParams) && REAL(cuGraphKernelNodeGetParams)(node, &p1) == CUDA_SUCCESS)
        return p1.func;
    return NULL;
}

static int kernel_node(CUgraphNode node, int type, void *arg)
{
    struct cover *c = arg;
    size_t local = 0;
    if (type != CU_GRAPH_NODE_TYPE_KERNEL)
        return 0;
    CUfunction f = node_function(node);
    if (f && (c->rc = vgpu_launch_local(f, &local, NULL)) != CUDA_SUCCESS)
        return -1;
    if (local > c->stack)
        c->stack = local;
    return 0;
}

CUresult vgpu_graph_kernels_cover(CUgraph g, size_t *stack)
{
    struct cover c = {0, CUDA_SUCCESS};
    *stack = 0;
    if (vgpu_cuda.exiting)
        return CUDA_SUCCESS;
    /* a graph the driver cannot list: its instantiation will say why */
    if (vgpu_graph_nodes(g, kernel_node, &c) != 0 && c.rc == CUDA_ERROR_OUT_OF_MEMORY)
        return c.rc;
    *stack = c.stack;
    return c.stack ? vgpu_stack_at_least(c.stack) : CUDA_SUCCESS;
}

/* exec's record, added when add (NULL: none, or no room). Caller holds lock. */
static struct need *find_locked(CUgraphExec exec, int add)
{
    for (size_t i = 0; i < nneeds; i++)
        if (needs[i].exec == exec)
            return &needs[i];
    if (!add)
        return NULL;
    if (nneeds == cap) {
        size_t n = cap ? cap * 2 : 16;
        struct need *t = realloc(needs, n * sizeof *t);
        if (!t)
            return NULL;
        needs = t;
        cap = n;
    }
    needs[nneeds] = (struct need){exec, 0};
    return &needs[nneeds++];
}

void vgpu_graph_exec_needs(CUgraphExec exec, size_t stack)
{
    if (!stack)
        return;
    pthread_mutex_lock(&lock);
    struct need *n = find_locked(exec, 1);
    if (n && stack > n->stack)
        n->stack = stack;
    pthread_mutex_unlock(&lock);
}

void vgpu_graph_exec_gone(CUgraphExec exec)
{
    pthread_mutex_lock(&lock);
    struct need *n = find_locked(exec, 0);
    if (n)
        *n = needs[--nneeds];
    pthread_mutex_unlock(&lock);
}

CUresult vgpu_graph_exec_cover(CUgraphExec exec)
{
    pthread_mutex_lock(&lock);
    struct need *n = find_locked(exec, 0);
    size_t stack = n ? n->stack : 0;
    pthread_mutex_unlock(&lock);
    return stack ? vgpu_stack_at_least(stack) : CUDA_SUCCESS;
}

/* An executable graph's kernel node given f: covered first, remembered with the graph. */
static CUresult node_gets(CUgraphExec exec, CUfunction f)
{
    size_t local = 0;
    CUresult rc = vgpu_launch_cover(f, &local);
    if (rc == CUDA_SUCCESS)
        vgpu_graph_exec_needs(exec, local);
    return rc;
}

VGPU_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    HOOK_ENTER(cuGraphExecKernelNodeSetParams, exec, node, params);
    CUresult rc = params ? node_gets(exec, params->func) : CUDA_SUCCESS;
    return rc != CUDA_SUCCESS ? rc : REAL(cuGraphExecKernelNodeSetParams)(exec, node, params);
}

VGPU_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_KERNEL_NODE_PARAMS_v2 *params)
{
    HOOK_ENTER(cuGraphExecKernelNodeSetParams_v2, exec, node, params);
    CUresult rc = params ? node_gets(exec, params->func ? params->func : (CUfunction)params->kern) : CUDA_SUCCESS;
    return rc != CUDA_SUCCESS ? rc : REAL(cuGraphExecKernelNodeSetParams_v2)(exec, node, params);
}

VGPU_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *params)
{
    HOOK_ENTER(cuGraphExecNodeSetParams, exec, node, params);
    CUresult rc = CUDA_SUCCESS;
    if (params && params->type == CU_GRAPH_NODE_TYPE_KERNEL)
        rc = node_gets(exec, params->u.kernel.func ? params->u.kernel.func : (CUfunction)params->u.kernel.kern);
    return rc != CUDA_SUCCESS ? rc : REAL(cuGraphExecNodeSetParams)(exec, node, params);
}

/* The executable graph takes graph's kernels: covered first. */
#define EXEC_UPDATE(CALL)                                                                                             \
    do {                                                                                                              \
        size_t stack_ = 0;                                                                                            \
        CUresult rc_ = vgpu_graph_kernels_cover(graph, &stack_);                                                      \
        if (rc_ != CUDA_SUCCESS)                                                                                      \
            return rc_;                                                                                               \
        rc_ = CALL;                                                                                                   \
        if (rc_ == CUDA_SUCCESS)                                                                                      \
            vgpu_graph_exec_needs(exec, stack_);                                                                      \
        return rc_;                                                                                                   \
    } while (0)

VGPU_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, void *result_info)
{
    HOOK_ENTER(cuGraphExecUpdate_v2, exec, graph, result_info);
    EXEC_UPDATE(REAL(cuGraphExecUpdate_v2)(exec, graph, result_info));
}

VGPU_EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode *err_node, int *result)
{
    HOOK_ENTER(cuGraphExecUpdate, exec, graph, err_node, result);
    EXEC_UPDATE(REAL(cuGraphExecUpdate)(exec, graph, err_node, result));
}

/* In a fork child: no executable graph is its own. */
static void forget_in_child(void)
{
    free(needs);
    needs = NULL;
    nneeds = cap = 0;
    pthread_mutex_init(&lock, NULL);
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

/* ---- launches and uploads: what the executable graph needs, covered again after a lowered stack ---- */
#define GRAPH_LAUNCH(NAME)                                                                                            \
    VGPU_EXPORT CUresult NAME(CUgraphExec exec, CUstream stream)                                                     \
    {                                                                                                                 \
        HOOK_ENTER(NAME, exec, stream);                                                                               \
        if (__builtin_expect(vgpu_cuda.audit, 0))                                                                    \
            vgpu_count_launch();                                                                                           \
        CUcontext ctx = NULL;                                                                                         \
        REAL(cuCtxGetCurrent)(&ctx);                                                                                  \
        uint64_t key = vgpu_target_key(exec, ctx, stream);                                                           \
        if (!vgpu_is_covered(key)) {                                                                                  \
            CUresult rc = vgpu_graph_exec_cover(exec);                                                                \
            if (rc != CUDA_SUCCESS)                                                                                   \
                return rc;                                                                                            \
            vgpu_remember_covered(key);                                                                               \
        }                                                                                                             \
        return REAL(NAME)(exec, stream);                                                                              \
    }
GRAPH_LAUNCH(cuGraphLaunch)
GRAPH_LAUNCH(cuGraphLaunch_ptsz)
GRAPH_LAUNCH(cuGraphUpload)
GRAPH_LAUNCH(cuGraphUpload_ptsz)
