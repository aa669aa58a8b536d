/* The test client's launch steps (issue 37): kernels whose launch makes the driver reserve
 * memory, launched through every entry point. Real PTX, so the same steps run on a GPU host
 * (tests/gpu/charge_truth.sh) and against the fake driver, which reads the PTX's .local arrays
 * and its malloc calls (tests/fake_modules.c).
 *   kernel:KIB[:MODE]   load a kernel whose threads each use KIB KiB of local memory; MODE: module
 *                       (default), malloc (the kernel calls malloc: the device heap), lib (a
 *                       library's CUkernel, launched as cudart 12+ launches), lib-malloc, lib-hidden
 *                       (the kernel handle asked of the real driver, $FAKE_DRIVER, past libvgpu, as
 *                       cudart gets some through private entry points)
 *   launch-k:N[:HOW]    launch kernel N once (one thread; the driver reserves for every thread
 *                       the GPU can hold) through HOW: plain ptsz ex ex_ptsz coop coop_ptsz gpa
 *                       gpa_ptsz legacy grid multi, or a graph: graph (a kernel node), graph-set
 *                       (kernel 0's graph, its node then given kernel N), graph-set2, graph-node,
 *                       graph-update (kernel 0's graph updated to kernel N's), graph-again (the
 *                       last graph launched again)
 *   kernel-unload:N     unload kernel N's module or library (the driver may then give a new kernel
 *                       the same handle: "kernel" says "same handle as N" when it does)
 *   ctx-new             a new context on device 0, left current (a library's kernel then runs in it) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "ptx.h"

static CUfunction kernels[64];
static void *homes[64]; /* each kernel's module or library (home_is_library) */
static int home_is_library[64];
static int nkernels;
static CUgraphExec last_exec;

static CUresult load_kernel(size_t kib, const char *mode, CUfunction *f, void **home)
{
    const char *ptx = ptx_with_local(kib << 10, strstr(mode, "malloc") != NULL);
    if (!strncmp(mode, "lib", 3)) {
        CUlibrary l = NULL;
        CUresult rc = CU(cuLibraryLoadData, (CUlibrary *, const void *, void *, void **, unsigned, void *, void **,
                                             unsigned))(&l, ptx, NULL, NULL, 0, NULL, NULL, 0);
        *home = l;
        if (rc || strcmp(mode, "lib-hidden") != 0)
            return rc ? rc : CU(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *))((CUkernel *)f, l, "lk");
        void *real = dlopen(getenv("FAKE_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
        void *get = real ? dlsym(real, "cuLibraryGetKernel") : NULL;
        return get ? ((CUresult(*)(CUkernel *, CUlibrary, const char *))get)((CUkernel *)f, l, "lk") : CUDA_ERROR_NOT_FOUND;
    }
    CUmodule m = NULL;
    CUresult rc = CU(cuModuleLoadData, (CUmodule *, const void *))(&m, ptx);
    *home = m;
    return rc ? rc : CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(f, m, "lk");
}

static CUdeviceptr out_ptr;
static unsigned idx_arg;
static void *params[] = {&out_ptr, &idx_arg};

typedef CUresult launch11(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                          void **, void **);
typedef CUresult launch10(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                          void **);

static CUresult graph_launch(CUfunction f, CUfunction later, const char *how)
{
    CUDA_KERNEL_NODE_PARAMS_v1 p1 = {f, 1, 1, 1, 1, 1, 1, 0, params, NULL};
    CUgraph g = NULL;
    CUgraphNode node = NULL;
    CUgraphExec e = NULL;
    CUresult rc = CU(cuGraphCreate, (CUgraph *, unsigned))(&g, 0);
    rc = rc ? rc : CU(cuGraphAddKernelNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const void *))(
                       &node, g, NULL, 0, &p1);
    rc = rc ? rc : CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(&e, g, 0);
    if (rc)
        return rc;
    last_exec = e;
    if (!strcmp(how, "graph-set")) {
        p1.func = later;
        rc = CU(cuGraphExecKernelNodeSetParams, (CUgraphExec, CUgraphNode, const void *))(e, node, &p1);
    } else if (!strcmp(how, "graph-set2")) {
        CUDA_KERNEL_NODE_PARAMS_v2 p2 = {later, 1, 1, 1, 1, 1, 1, 0, params, NULL, NULL, NULL};
        rc = CU(cuGraphExecKernelNodeSetParams_v2, (CUgraphExec, CUgraphNode, const void *))(e, node, &p2);
    } else if (!strcmp(how, "graph-node")) {
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_KERNEL;
        np.u.kernel = (CUDA_KERNEL_NODE_PARAMS_v2){later, 1, 1, 1, 1, 1, 1, 0, params, NULL, NULL, NULL};
        rc = CU(cuGraphExecNodeSetParams, (CUgraphExec, CUgraphNode, void *))(e, node, &np);
    } else if (!strcmp(how, "graph-update")) {
        CUgraph g2 = NULL;
        CUgraphNode n2 = NULL;
        CUDA_KERNEL_NODE_PARAMS_v1 q = {later, 1, 1, 1, 1, 1, 1, 0, params, NULL};
        rc = CU(cuGraphCreate, (CUgraph *, unsigned))(&g2, 0);
        rc = rc ? rc : CU(cuGraphAddKernelNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const void *))(
                           &n2, g2, NULL, 0, &q);
        char info[64];
        rc = rc ? rc : CU(cuGraphExecUpdate_v2, (CUgraphExec, CUgraph, void *))(e, g2, info);
    }
    return rc ? rc : CU(cuGraphLaunch, (CUgraphExec, CUstream))(e, NULL);
}

static CUresult launch(CUfunction f, const char *how)
{
    if (!strncmp(how, "graph", 5))
        return !strcmp(how, "graph-again") ? CU(cuGraphLaunch, (CUgraphExec, CUstream))(last_exec, NULL)
               : !strcmp(how, "graph")     ? graph_launch(f, NULL, how)
                                           : graph_launch(kernels[0], f, how);
    if (!strcmp(how, "ptsz"))
        return CU_AS(cuLaunchKernel_ptsz, launch11 *)(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    if (!strncmp(how, "gpa", 3)) {
        void *p = NULL;
        CU(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *))(
            "cuLaunchKernel", &p, 12000, strstr(how, "ptsz") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, NULL);
        return p ? ((launch11 *)p)(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) : CUDA_ERROR_NOT_FOUND;
    }
    if (!strncmp(how, "coop", 4))
        return (strstr(how, "ptsz") ? CU_AS(cuLaunchCooperativeKernel_ptsz, launch10 *)
                                    : CU_AS(cuLaunchCooperativeKernel, launch10 *))(f, 1, 1, 1, 1, 1, 1, 0, NULL, params);
    if (!strncmp(how, "ex", 2)) {
        CUlaunchConfig config = {1, 1, 1, 1, 1, 1, 0, NULL, NULL, 0};
        return (strstr(how, "ptsz") ? CU(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **))
                                    : CU(cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **)))(
            &config, f, params, NULL);
    }
    if (!strcmp(how, "multi")) {
        CUDA_LAUNCH_PARAMS one = {f, 1, 1, 1, 1, 1, 1, 0, NULL, params};
        return CU(cuLaunchCooperativeKernelMultiDevice, (CUDA_LAUNCH_PARAMS *, unsigned, unsigned))(&one, 1, 0);
    }
    if (!strcmp(how, "legacy"))
        return CU(cuLaunch, (CUfunction))(f);
    if (!strcmp(how, "grid"))
        return CU(cuLaunchGridAsync, (CUfunction, int, int, CUstream))(f, 1, 1, NULL);
    return CU_AS(cuLaunchKernel, launch11 *)(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

int client_launch_step(const char *step, const char *arg1, const char *arg2)
{
    if (!strcmp(step, "kernel")) {
        CUfunction f = NULL;
        void *home = NULL;
        const char *mode = arg2 ? arg2 : "module";
        CUresult rc = load_kernel((size_t)atol(arg1), mode, &f, &home);
        int local = -1, same = -1;
        if (rc == CUDA_SUCCESS) {
            for (int i = 0; i < nkernels && i < 64 && same < 0; i++)
                if (kernels[i] == f)
                    same = i;
            homes[nkernels % 64] = home;
            home_is_library[nkernels % 64] = !strncmp(mode, "lib", 3);
            kernels[nkernels++ % 64] = f;
            if (strncmp(mode, "lib", 3) != 0)
                CU(cuFuncGetAttribute, (int *, int, CUfunction))(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
        }
        if (same >= 0)
            printf("kernel %s %s rc=%d local=%d same handle as %d\n", arg1, mode, rc, local, same);
        else
            printf("kernel %s %s rc=%d local=%d\n", arg1, mode, rc, local);
        return 1;
    }
    if (!strcmp(step, "kernel-unload")) {
        int n = atoi(arg1) % 64;
        CUresult rc = CUDA_ERROR_INVALID_VALUE;
        if (homes[n] && home_is_library[n])
            rc = CU(cuLibraryUnload, (CUlibrary))((CUlibrary)homes[n]);
        else if (homes[n])
            rc = CU(cuModuleUnload, (CUmodule))((CUmodule)homes[n]);
        printf("kernel-unload %s rc=%d\n", arg1, rc);
        return 1;
    }
    if (!strcmp(step, "ctx-new")) {
        CUcontext c = NULL;
        printf("ctx-new rc=%d\n", CU(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice))(&c, 0, 0));
        return 1;
    }
    if (!strcmp(step, "launch-k")) {
        const char *how = arg2 ? arg2 : "plain";
        CUresult rc = launch(kernels[atoi(arg1) % 64], how);
        CUresult rs = CU(cuCtxSynchronize, (void))();
        size_t stack = 0;
        CU(cuCtxGetLimit, (size_t *, int))(&stack, CU_LIMIT_STACK_SIZE);
        printf("launch-k %s %s rc=%d sync=%d stack=%zu\n", arg1, how, rc, rs, stack >> 10);
        return 1;
    }
    return 0;
}
