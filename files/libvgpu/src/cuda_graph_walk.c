/* A graph's nodes, child graphs' included, walked for the graph memory (cuda_graphs.c) and the
 * graph kernels (cuda_graph_kernels.c). */
#include <stdlib.h>

#include "cuda_shim.h"

/* Every node of g, child graphs' included, to visit (which stops the walk with -1). */
static int each_node(CUgraph g, int (*visit)(CUgraphNode node, int type, void *arg), void *arg, int depth)
{
    size_t n = 0;
    if (!REAL(cuGraphGetNodes) || !REAL(cuGraphNodeGetType) || REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS)
        return -1;
    if (n == 0)
        return 0;
    CUgraphNode *nodes = malloc(n * sizeof *nodes);
    if (!nodes || REAL(cuGraphGetNodes)(g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int type = -1;
        CUgraph child = NULL;
        if (REAL(cuGraphNodeGetType)(nodes[i], &type) != CUDA_SUCCESS)
            rc = -1;
        else if (type == CU_GRAPH_NODE_TYPE_GRAPH && depth < 16 && REAL(cuGraphChildGraphNodeGetGraph))
            rc = REAL(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) == CUDA_SUCCESS
                     ? each_node(child, visit, arg, depth + 1)
                     : -1;
        else
            rc = visit(nodes[i], type, arg);
    }
    free(nodes);
    return rc;
}

int vgpu_graph_nodes(CUgraph g, int (*visit)(CUgraphNode node, int type, void *arg), void *arg)
{
    return each_node(g, visit, arg, 0);
}
