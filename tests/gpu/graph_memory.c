/* CUDA graph memory through the driver API, for tests/gpu/graph_memory.sh (issue 18).
 *   graph_memory MIB node|capture [HOLD_SECONDS]
 * node: a graph with one allocation node of MIB (cuGraphAddMemAllocNode); capture: the same from
 * stream capture of cuMemAllocAsync + cuMemsetD8Async. Instantiates, launches, writes the whole
 * buffer and reads its last byte back, holds HOLD_SECONDS ("holding"), frees, destroys, trims.
 * Exit status: 0 ran, 2 CUDA_ERROR_OUT_OF_MEMORY (the step that got it is printed), 1 other.
 * Built with gcc only (no CUDA toolkit): the ABI comes from files/libvgpu/src/abi.h. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"

static void *cuda;

static void *sym(const char *name)
{
    void *p = dlsym(cuda, name);
    if (!p) {
        fprintf(stderr, "graph_memory: %s missing from libcuda.so.1\n", name);
        exit(1);
    }
    return p;
}
#define CU(name, args) ((CUresult(*) args)sym(#name))

static const char *err_name(CUresult rc)
{
    const char *n = "?";
    CU(cuGetErrorName, (CUresult, const char **))(rc, &n);
    return n;
}

/* Exit unless rc is CUDA_SUCCESS: 2 for out of memory. */
static void check(CUresult rc, const char *step)
{
    if (rc == CUDA_SUCCESS)
        return;
    printf("%s: %s (%d)\n", step, err_name(rc), rc);
    exit(rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1);
}

static unsigned long long reserved(CUdevice dev)
{
    unsigned long long v = 0;
    CU(cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v);
    return v >> 20;
}

int main(int argc, char **argv)
{
    if (argc < 3 || atol(argv[1]) <= 0 || (strcmp(argv[2], "node") && strcmp(argv[2], "capture"))) {
        fprintf(stderr, "usage: graph_memory MIB node|capture [HOLD_SECONDS]\n");
        return 1;
    }
    size_t mib = (size_t)atol(argv[1]), bytes = mib << 20;
    int capture = !strcmp(argv[2], "capture"), hold = argc > 3 ? atoi(argv[3]) : 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(cuda = dlopen("libcuda.so.1", RTLD_NOW))) {
        fprintf(stderr, "graph_memory: %s\n", dlerror());
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    check(CU(cuInit, (unsigned))(0), "cuInit");
    check(CU(cuDeviceGet, (CUdevice *, int))(&dev, 0), "cuDeviceGet");
    check(CU(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(CU(cuCtxSetCurrent, (CUcontext))(ctx), "cuCtxSetCurrent");

    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUstream stream = NULL;
    CUdeviceptr buf = 0;
    check(CU(cuStreamCreate, (CUstream *, unsigned))(&stream, 1 /* non-blocking */), "cuStreamCreate");
    if (capture) {
        check(CU(cuStreamBeginCapture_v2, (CUstream, int))(stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
              "cuStreamBeginCapture");
        CUresult rc = CU(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))(&buf, bytes, stream);
        if (rc == CUDA_SUCCESS)
            rc = CU(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))(buf, 0x5a, bytes, stream);
        CUresult re = CU(cuStreamEndCapture, (CUstream, CUgraph *))(stream, &graph);
        check(rc, "cuMemAllocAsync in stream capture");
        check(re, "cuStreamEndCapture");
    } else {
        CUgraphNode node;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = dev;
        p.bytesize = bytes;
        check(CU(cuGraphCreate, (CUgraph *, unsigned))(&graph, 0), "cuGraphCreate");
        check(CU(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *))(&node, graph, NULL, 0, &p),
              "cuGraphAddMemAllocNode");
        buf = p.dptr;
    }
    check(CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(&exec, graph, 0),
          "cuGraphInstantiateWithFlags");
    check(CU(cuGraphLaunch, (CUgraphExec, CUstream))(exec, stream), "cuGraphLaunch");
    if (!capture)
        check(CU(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))(buf, 0x5a, bytes, stream),
              "cuMemsetD8Async after the launch");
    check(CU(cuStreamSynchronize, (CUstream))(stream), "cuStreamSynchronize");
    unsigned char last = 0;
    check(CU(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))(&last, buf + bytes - 1, 1), "cuMemcpyDtoH");
    size_t free_b = 0, total_b = 0;
    CU(cuMemGetInfo_v2, (size_t *, size_t *))(&free_b, &total_b);
    printf("graph (%s) of %zu MiB ran; the whole buffer written, last byte %#x; graph pool %llu MiB; cuMemGetInfo: "
           "free %zu MiB, total %zu MiB\n",
           argv[2], mib, last, reserved(dev), free_b >> 20, total_b >> 20);
    if (hold > 0) {
        printf("holding %d s\n", hold);
        sleep((unsigned)hold);
    }
    check(CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(buf, stream), "cuMemFreeAsync");
    check(CU(cuStreamSynchronize, (CUstream))(stream), "cuStreamSynchronize");
    check(CU(cuGraphExecDestroy, (CUgraphExec))(exec), "cuGraphExecDestroy");
    check(CU(cuGraphDestroy, (CUgraph))(graph), "cuGraphDestroy");
    unsigned long long before = reserved(dev);
    check(CU(cuDeviceGraphMemTrim, (CUdevice))(dev), "cuDeviceGraphMemTrim");
    CU(cuMemGetInfo_v2, (size_t *, size_t *))(&free_b, &total_b);
    printf("freed, destroyed; graph pool %llu MiB, after cuDeviceGraphMemTrim %llu MiB; cuMemGetInfo: free %zu MiB\n",
           before, reserved(dev), free_b >> 20);
    return last == 0x5a ? 0 : 1;
}
