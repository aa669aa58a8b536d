/* What a kernel launch makes the driver reserve (issue 37), measured per process through NVML.
 *
 *   launch-reservations SCENARIO [ARG...]        prints "step <name> rc=<r> held=<MiB> delta=<MiB> ..." lines
 *
 * Run natively it measures the driver: what each limit and each launch entry point takes, read
 * from NVML's per-process figure before and after the call (nothing else runs in the process).
 * Run under libvgpu (tests/gpu/charge_truth.sh) the same scenarios must end in
 * CUDA_ERROR_OUT_OF_MEMORY at the call that would take the container past its quota.
 * Scenarios:
 *   info                               the device (SMs, resident threads per SM) and every limit's default
 *   local KIB BLOCKS THREADS LAUNCHER  one kernel with KIB KiB of local memory per thread, launched once
 *                                      through LAUNCHER: plain ptsz ex coop gpa graph
 *   preset KIB                         cuCtxSetLimit(STACK_SIZE, KIB KiB) first, then the local kernel
 *   sweep                              the stack limit raised 1 -> 128 KiB step by step, then lowered
 *   grow                               local kernels of 16, 64, 16 KiB, then the stack limit lowered
 *   small                              kernels of 1..16 KiB launched on 32 threads (truth_random's), then the
 *                                      stack limit set to sizes that are not a KiB multiple
 *   heap MIB                           the malloc heap set to MIB (0: left at its default), then a plain
 *                                      launch, then a kernel that calls malloc
 *   printf MIB                         the printf FIFO set to MIB, then a plain launch, then a printf kernel
 *   pending N / syncdepth N            the device runtime's pending launch count / sync depth set to N,
 *                                      then a plain launch
 *   cdp N DEVRT                        the pending launch count set to N, then a kernel that launches a
 *                                      kernel (linked with DEVRT, the toolkit's libcudadevrt.a)
 *   kernel-attr                        what cuFuncGetAttribute says of a library's CUkernel handle
 *   fork-exec MIB                      MIB allocated, then a child that execs sleep 5 while this
 *                                      process exits: does the memory outlive it (are the driver's
 *                                      descriptors inherited across exec)?
 * Built with gcc alone (no CUDA toolkit: kernels are PTX the driver compiles). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../files/libvgpu/src/ptx.h"

typedef int CUresult;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUgraph, *CUgraphNode, *CUgraphExec;
typedef unsigned long long CUdeviceptr;

static void *cuda, *nvml, *nvml_dev;
static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("missing-symbol %s\n", name);
        exit(3);
    }
    return p;
}
#define CU(name, args) ((CUresult(*) args)sym(cuda, #name))

static long long last_held = -1;
static long long held_mib(void)
{
    struct {
        unsigned pid;
        unsigned long long used;
        unsigned gi, ci;
    } rows[256];
    unsigned n = 256;
    if (((int (*)(void *, unsigned *, void *))sym(nvml, "nvmlDeviceGetComputeRunningProcesses_v2"))(nvml_dev, &n, rows))
        return -1;
    for (unsigned i = 0; i < n; i++)
        if (rows[i].pid == (unsigned)getpid())
            return (long long)(rows[i].used >> 20);
    return 0;
}

static size_t limit_of(int which)
{
    size_t v = 0;
    CU(cuCtxGetLimit, (size_t *, int))(&v, which);
    return v;
}

static void step(const char *name, CUresult rc)
{
    long long now = held_mib();
    printf("step %-24s rc=%d held=%lld delta=%lld stack=%zu heap=%zu fifo=%zu\n", name, rc, now,
           last_held < 0 ? 0 : now - last_held, limit_of(0), limit_of(2) >> 20, limit_of(1) >> 20);
    fflush(stdout);
    last_held = now;
}

static CUfunction local_kernel, plain_kernel, malloc_kernel, printf_kernel;

/* The kernel lk of a PTX text, loaded as a module of its own. */
static CUresult load(const char *ptx, const char *name, CUfunction *f)
{
    CUmodule m = NULL;
    CUresult rc = CU(cuModuleLoadData, (CUmodule *, const void *))(&m, ptx);
    return rc ? rc : CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(f, m, name);
}

/* The kernels of a scenario: with local_bytes of local memory a thread, a plain one, one that
 * calls malloc and one that calls printf. */
static CUresult load_module(size_t local_bytes)
{
    static const char printf_ptx[] =
        ".version 7.0\n.target sm_50\n.address_size 64\n"
        ".extern .func (.param .b32 func_retval0) vprintf (.param .b64 p0, .param .b64 p1);\n"
        ".global .align 1 .b8 fmt[4] = {104, 105, 10, 0};\n"
        ".visible .entry pk()\n{\n\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<3>;\n\tmov.u64 %rd1, fmt;\n"
        "\tcvta.global.u64 %rd2, %rd1;\n\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd2;\n"
        "\t.param .b64 param1;\n\tst.param.b64 [param1+0], 0;\n\t.param .b32 retval0;\n"
        "\tcall.uni (retval0), vprintf, (param0, param1);\n\tld.param.b32 %r1, [retval0+0];\n\t}\n"
        "\tret;\n}\n";
    CUresult rc = load(ptx_with_local(local_bytes, 0), "lk", &local_kernel);
    rc = rc ? rc : load(ptx_with_local(8, 0), "lk", &plain_kernel);
    rc = rc ? rc : load(ptx_with_local(8, 1), "lk", &malloc_kernel);
    return rc ? rc : load(printf_ptx, "pk", &printf_kernel);
}

typedef CUresult launch_fn(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **);
static CUresult launch(CUfunction f, unsigned blocks, unsigned threads, void **params, const char *how)
{
    if (!strcmp(how, "ptsz"))
        return ((launch_fn *)sym(cuda, "cuLaunchKernel_ptsz"))(f, blocks, 1, 1, threads, 1, 1, 0, NULL, params, NULL);
    if (!strcmp(how, "gpa")) {
        void *p = NULL;
        CU(cuGetProcAddress_v2, (const char *, void **, int, unsigned long long, int *))("cuLaunchKernel", &p, 12000, 0,
                                                                                          NULL);
        return ((launch_fn *)p)(f, blocks, 1, 1, threads, 1, 1, 0, NULL, params, NULL);
    }
    if (!strcmp(how, "coop"))
        return CU(cuLaunchCooperativeKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                              unsigned, CUstream, void **))(f, blocks, 1, 1, threads, 1, 1, 0, NULL,
                                                                            params);
    if (!strcmp(how, "ex")) {
        struct {
            unsigned gx, gy, gz, bx, by, bz, shmem;
            CUstream stream;
            void *attrs;
            unsigned nattrs;
        } config = {blocks, 1, 1, threads, 1, 1, 0, NULL, NULL, 0};
        return CU(cuLaunchKernelEx, (const void *, CUfunction, void **, void **))(&config, f, params, NULL);
    }
    if (!strcmp(how, "graph")) {
        struct {
            CUfunction func;
            unsigned gx, gy, gz, bx, by, bz, shmem;
            void **params, **extra;
        } node = {f, blocks, 1, 1, threads, 1, 1, 0, params, NULL};
        CUgraph g = NULL;
        CUgraphNode n = NULL;
        CUgraphExec e = NULL;
        CUresult rc = CU(cuGraphCreate, (CUgraph *, unsigned))(&g, 0);
        rc = rc ? rc : CU(cuGraphAddKernelNode, (CUgraphNode *, CUgraph, void *, size_t, void *))(&n, g, NULL, 0, &node);
        rc = rc ? rc : CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(&e, g, 0);
        step("graph-instantiate", rc);
        rc = rc ? rc : CU(cuGraphUpload, (CUgraphExec, CUstream))(e, NULL);
        CU(cuCtxSynchronize, (void))();
        step("graph-upload", rc);
        return rc ? rc : CU(cuGraphLaunch, (CUgraphExec, CUstream))(e, NULL);
    }
    return CU(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **))(f, blocks, 1, 1, threads, 1, 1, 0, NULL, params, NULL);
}

static CUresult launch_local(unsigned blocks, unsigned threads, const char *how)
{
    CUdeviceptr out = 0;
    unsigned idx = 0;
    void *params[] = {&out, &idx};
    CUresult rc = launch(local_kernel, blocks, threads, params, how);
    CUresult rs = CU(cuCtxSynchronize, (void))();
    return rc ? rc : rs;
}

static CUresult launch_plain(CUfunction f, void **params)
{
    CUresult rc = launch(f, 1, 1, params, "plain");
    CUresult rs = CU(cuCtxSynchronize, (void))();
    return rc ? rc : rs;
}

/* A parent kernel that launches a child from the device (dynamic parallelism, CUDA 12 ABI). */
static const char cdp_ptx[] =
    ".version 7.8\n.target sm_90\n.address_size 64\n"
    ".extern .func (.param .b64 func_retval0) cudaGetParameterBufferV2 (.param .b64 p0, .param .align 4 .b8 "
    "p1[12], .param .align 4 .b8 p2[12], .param .b32 p3);\n"
    ".extern .func (.param .b32 func_retval0) cudaLaunchDeviceV2 (.param .b64 p0, .param .b64 p1);\n"
    ".visible .entry child()\n{\n\tret;\n}\n"
    ".visible .entry parent()\n{\n\t.reg .pred %p<2>;\n\t.reg .b64 %rd<4>;\n\tmov.u64 %rd1, child;\n"
    "\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd1;\n\t.param .align 4 .b8 param1[12];\n"
    "\tst.param.b32 [param1+0], 1;\n\tst.param.b32 [param1+4], 1;\n\tst.param.b32 [param1+8], 1;\n"
    "\t.param .align 4 .b8 param2[12];\n\tst.param.b32 [param2+0], 1;\n\tst.param.b32 [param2+4], 1;\n"
    "\tst.param.b32 [param2+8], 1;\n\t.param .b32 param3;\n\tst.param.b32 [param3+0], 0;\n"
    "\t.param .b64 retval0;\n\tcall.uni (retval0), cudaGetParameterBufferV2, (param0, param1, param2, param3);\n"
    "\tld.param.b64 %rd2, [retval0+0];\n\t}\n\tsetp.eq.s64 %p1, %rd2, 0;\n\t@%p1 bra DONE;\n"
    "\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd2;\n\t.param .b64 param1;\n"
    "\tst.param.b64 [param1+0], 0;\n\t.param .b32 retval0;\n\tcall.uni (retval0), cudaLaunchDeviceV2, (param0, "
    "param1);\n\t}\nDONE:\n\tret;\n}\n";

static CUresult load_cdp(const char *devrt, CUfunction *parent)
{
    void *state = NULL, *cubin = NULL;
    size_t size = 0;
    CUmodule m = NULL;
    CUresult rc = CU(cuLinkCreate_v2, (unsigned, void *, void **, void **))(0, NULL, NULL, &state);
    rc = rc ? rc : CU(cuLinkAddData_v2, (void *, int, void *, size_t, const char *, unsigned, void *, void **))(
                       state, 1 /* PTX */, (void *)cdp_ptx, sizeof cdp_ptx, "cdp.ptx", 0, NULL, NULL);
    rc = rc ? rc : CU(cuLinkAddFile_v2, (void *, int, const char *, unsigned, void *, void **))(
                       state, 4 /* LIBRARY */, devrt, 0, NULL, NULL);
    rc = rc ? rc : CU(cuLinkComplete, (void *, void **, size_t *))(state, &cubin, &size);
    rc = rc ? rc : CU(cuModuleLoadData, (CUmodule *, const void *))(&m, cubin);
    rc = rc ? rc : CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(parent, m, "parent");
    if (state)
        CU(cuLinkDestroy, (void *))(state);
    return rc;
}

static int attr(int which)
{
    int v = 0;
    CU(cuDeviceGetAttribute, (int *, int, int))(&v, which, 0);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: launch-reservations SCENARIO [ARG...]\n"), 2;
    const char *s = argv[1];
    long a1 = argc > 2 ? atol(argv[2]) : 0;
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!cuda || !nvml)
        return printf("no driver: %s\n", dlerror()), 3;
    ((int (*)(void))sym(nvml, "nvmlInit_v2"))();
    ((int (*)(unsigned, void **))sym(nvml, "nvmlDeviceGetHandleByIndex_v2"))(0, &nvml_dev);
    CUcontext ctx = NULL;
    CU(cuInit, (unsigned))(0);
    CUresult rc = CU(cuDevicePrimaryCtxRetain, (CUcontext *, int))(&ctx, 0);
    rc = rc ? rc : CU(cuCtxSetCurrent, (CUcontext))(ctx);
    step("context", rc);
    size_t local_bytes = !strcmp(s, "local") || !strcmp(s, "preset") ? (size_t)a1 << 10 : 64 << 10;
    rc = load_module(!strcmp(s, "grow") ? 16 << 10 : local_bytes);
    step("module", rc);
    if (rc)
        return 1;
    int lsize = 0;
    CU(cuFuncGetAttribute, (int *, int, CUfunction))(&lsize, 3 /* LOCAL_SIZE_BYTES */, local_kernel);
    printf("local-size-bytes %d\n", lsize);
    if (!strcmp(s, "info")) {
        printf("sms %d threads-per-sm %d\n", attr(16), attr(39));
        for (int l = 0; l <= 9; l++) {
            size_t v = 0;
            printf("limit %d rc=%d value=%zu\n", l, CU(cuCtxGetLimit, (size_t *, int))(&v, l), v);
        }
    } else if (!strcmp(s, "local")) {
        step(argc > 5 ? argv[5] : "plain",
             launch_local(argc > 3 ? (unsigned)atoi(argv[3]) : 1, argc > 4 ? (unsigned)atoi(argv[4]) : 1,
                          argc > 5 ? argv[5] : "plain"));
        step("again", launch_local(1, 1, "plain"));
    } else if (!strcmp(s, "preset")) {
        step("set-stack", CU(cuCtxSetLimit, (int, size_t))(0, local_bytes));
        step("launch", launch_local(132, 256, "plain"));
    } else if (!strcmp(s, "sweep")) {
        static const int kib[] = {1, 2, 4, 8, 16, 32, 48, 64, 128, 4, 1};
        for (unsigned i = 0; i < sizeof kib / sizeof kib[0]; i++) {
            char name[32];
            snprintf(name, sizeof name, "stack-%dKiB", kib[i]);
            step(name, CU(cuCtxSetLimit, (int, size_t))(0, (size_t)kib[i] << 10));
        }
    } else if (!strcmp(s, "grow")) {
        step("local-16KiB", launch_local(132, 256, "plain"));
        CUresult r2 = load_module(64 << 10);
        step("module-64KiB", r2);
        step("local-64KiB", launch_local(132, 256, "plain"));
        r2 = load_module(16 << 10);
        step("local-16KiB-again", r2 ? r2 : launch_local(132, 256, "plain"));
        step("stack-1KiB", CU(cuCtxSetLimit, (int, size_t))(0, 1024));
        step("local-16KiB-after", launch_local(132, 256, "plain"));
    } else if (!strcmp(s, "small")) {
        /* what truth_random's kernels do (1..16 KiB, one block of 32 threads): each one's local size
         * as the driver tells it, and what its launch grows; then set to a size and launched at it */
        for (int kib = 1; kib <= 16; kib++) {
            char name[40];
            int lsz = 0;
            CUresult r2 = load(ptx_with_local((size_t)kib << 10, 0), "lk", &local_kernel);
            CU(cuFuncGetAttribute, (int *, int, CUfunction))(&lsz, 3, local_kernel);
            snprintf(name, sizeof name, "local-%dKiB(size=%d)", kib, lsz);
            step(name, r2 ? r2 : launch_local(1, 32, "plain"));
        }
        /* lowered, then raised below the high-water: taken at the call, or only at a launch? */
        CUfunction k2 = NULL, k3 = NULL;
        load(ptx_with_local(2 << 10, 0), "lk", &k2);
        load(ptx_with_local(3 << 10, 0), "lk", &k3);
        step("stack-1KiB", CU(cuCtxSetLimit, (int, size_t))(0, 1024));
        step("stack-3KiB", CU(cuCtxSetLimit, (int, size_t))(0, 3072));
        step("sync", CU(cuCtxSynchronize, (void))());
        local_kernel = plain_kernel;
        step("plain-at-3KiB", launch_local(1, 32, "plain"));
        local_kernel = k2;
        step("local-2KiB-at-3KiB", launch_local(1, 32, "plain"));
        local_kernel = k3;
        step("local-3KiB-at-3KiB", launch_local(1, 32, "plain"));
        step("stack-1KiB-again", CU(cuCtxSetLimit, (int, size_t))(0, 1024));
        step("stack-2KiB+8", CU(cuCtxSetLimit, (int, size_t))(0, 2056));
        step("local-3KiB-at-2KiB+8", launch_local(1, 32, "plain"));
    } else if (!strcmp(s, "heap") || !strcmp(s, "printf")) {
        int heap = !strcmp(s, "heap");
        if (a1)
            step(heap ? "set-heap" : "set-fifo", CU(cuCtxSetLimit, (int, size_t))(heap ? 2 : 1, (size_t)a1 << 20));
        CUdeviceptr out = 0;
        unsigned idx = 0;
        void *params[] = {&out, &idx};
        step("plain-launch", launch_plain(plain_kernel, params));
        step(heap ? "malloc-launch" : "printf-launch", launch_plain(heap ? malloc_kernel : printf_kernel, params));
        step("again", launch_plain(heap ? malloc_kernel : printf_kernel, params));
        if (a1)
            step(heap ? "set-heap-after" : "set-fifo-after",
                 CU(cuCtxSetLimit, (int, size_t))(heap ? 2 : 1, (size_t)(a1 + 64) << 20));
    } else if (!strcmp(s, "kernel-attr")) {
        void *lib = NULL, *kernel = NULL;
        int v = -1;
        CUresult r1 = CU(cuLibraryLoadData, (void **, const void *, void *, void **, unsigned, void *, void **,
                                             unsigned))(&lib, ptx_with_local(16 << 10, 0), NULL, NULL, 0, NULL, NULL, 0);
        CUresult r2 = r1 ? r1 : CU(cuLibraryGetKernel, (void **, void *, const char *))(&kernel, lib, "lk");
        CUresult r3 = r2 ? r2 : CU(cuFuncGetAttribute, (int *, int, CUfunction))(&v, 3, kernel);
        printf("kernel-attr load=%d kernel=%d cuFuncGetAttribute(CUkernel)=%d local=%d\n", r1, r2, r3, v);
    } else if (!strcmp(s, "fork-exec")) {
        CUdeviceptr p = 0;
        step("alloc", CU(cuMemAlloc_v2, (CUdeviceptr *, size_t))(&p, (size_t)a1 << 20));
        pid_t child = fork();
        if (child == 0) {
            execlp("sleep", "sleep", "5", (char *)NULL);
            _exit(127);
        }
        printf("fork-exec parent=%d child=%d\n", (int)getpid(), (int)child);
        fflush(stdout);
        _exit(0);
    } else if (!strcmp(s, "cdp")) {
        CUfunction parent = NULL;
        CUresult rc2 = argc > 3 ? load_cdp(argv[3], &parent) : 1;
        step("link-cdp", rc2);
        if (rc2)
            return 0;
        step("set-pending", CU(cuCtxSetLimit, (int, size_t))(4, (size_t)a1));
        step("cdp-launch", launch_plain(parent, NULL));
        step("cdp-again", launch_plain(parent, NULL));
    } else if (!strcmp(s, "pending") || !strcmp(s, "syncdepth")) {
        CUdeviceptr out = 0;
        unsigned idx = 0;
        void *params[] = {&out, &idx};
        step("set", CU(cuCtxSetLimit, (int, size_t))(!strcmp(s, "pending") ? 4 : 3, (size_t)a1));
        step("plain-launch", launch_plain(plain_kernel, params));
    } else {
        return fprintf(stderr, "unknown scenario %s\n", s), 2;
    }
    return 0;
}
