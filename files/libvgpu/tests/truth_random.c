/* The invariant under a seeded random sequence (issue 24): two worker processes of one container
 * take turns making driver calls through libcuda.so.1 as the loader finds it (libvgpu), mixing
 * every allocation path, frees, pool trims and release thresholds, contexts, modules and
 * libraries, graphs, virtual memory, launches of kernels with growing local memory, of kernels
 * that use the device heap, and of graphs with kernel nodes (issue 37); after every step a checker process that does not load
 * libvgpu reads the GPU's own count (NVML) of the two workers and checks it stays within the
 * quota plus the allowance. Every refusal must be CUDA_ERROR_OUT_OF_MEMORY. The fake driver's
 * suite (run-tests.sh) and the H200's (tests/gpu/charge_truth.sh) run the same program.
 *
 *   truth_random worker ID SEED STEPS TURNFILE MAXMIB    (ID 0 or 1; steps k with k % 2 == ID)
 *   truth_random checker STEPS TURNFILE LIMIT_MIB        (NVML: $TRUTH_NVML, else libnvidia-ml.so.1)
 *
 * The turn file orders the three: worker k % 2 makes step k, then the checker checks it. Same
 * seed, same sequence of calls. Output: one line per refused or failed call, and a summary;
 * with TRUTH_VERBOSE every call, and what the GPU held for each worker after each step; at the
 * first violation the checker runs the command in TRUTH_STATS (libvgpu's own count, read from
 * outside with manage --stats). */
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "abi.h"
#include "ptx.h"

struct turns {
    uint64_t turn;      /* 2k: worker k % 2 makes step k; 2k + 1: the checker checks it */
    uint32_t pid[2];
    uint32_t ready[2];
    uint64_t failed;    /* a worker gave up: everyone stops */
};

static struct turns *map_turns(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror(path);
        exit(1);
    }
    struct turns *t = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return t;
}

/* Wait until the turn is want (progress of the others), or give up after a minute without it. */
static int wait_turn(struct turns *t, uint64_t want)
{
    struct timespec start, now, nap = {0, 50000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (__atomic_load_n(&t->turn, __ATOMIC_ACQUIRE) != want) {
        if (__atomic_load_n(&t->failed, __ATOMIC_RELAXED))
            return -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 60) {
            fprintf(stderr, "no progress to turn %llu in 60 s\n", (unsigned long long)want);
            __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* ---------------------------------------------------------------- the worker */
static void *cuda;
static void *sym(const char *name)
{
    void *p = dlsym(cuda, name);
    if (!p) {
        printf("missing %s\n", name);
        exit(3);
    }
    return p;
}
#define CU(name, args) ((CUresult(*) args)sym(#name))

enum kind { NONE, LINEAR, ASYNC, VMM, ARRAY, LINEAR1, CONTEXT, MODULE, LIBRARY, GRAPH };
struct held {
    int kind;
    uint64_t a, b, c; /* pointer / handle, VA, size */
};
#define HELD 64
static struct held held[HELD];
static unsigned seed;
static CUcontext primary;
static CUmemoryPool made_pool;
static long ok, oom, other, unserved;
static int heap_fixed; /* a kernel that calls malloc ran: the heap cannot be set again */

/* h holds what a call made, when it succeeded */
#define KEEP(KIND, A, B, C)                                                                                           \
    do {                                                                                                              \
        if (*rc == CUDA_SUCCESS)                                                                                      \
            *h = (struct held){KIND, A, B, C};                                                                        \
    } while (0)

static unsigned pick(unsigned n)
{
    return (unsigned)rand_r(&seed) % n;
}

static struct held *free_slot(void)
{
    for (int i = 0; i < HELD; i++)
        if (held[i].kind == NONE)
            return &held[i];
    return NULL;
}

/* Release what h holds; the call's result. */
static CUresult release(struct held *h)
{
    CUresult rc = CUDA_SUCCESS;
    switch (h->kind) {
    case LINEAR:
        rc = CU(cuMemFree_v2, (CUdeviceptr))(h->a);
        break;
    case LINEAR1:
        rc = CU(cuMemFree, (CUdeviceptr_v1))((CUdeviceptr_v1)h->a);
        break;
    case ASYNC:
        rc = CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(h->a, NULL);
        break;
    case VMM: /* the handle was released at once or is released now; the unmap frees it */
        rc = CU(cuMemUnmap, (CUdeviceptr, size_t))(h->b, h->c);
        if (rc == CUDA_SUCCESS && h->a)
            rc = CU(cuMemRelease, (CUmemGenericAllocationHandle))(h->a);
        if (rc == CUDA_SUCCESS)
            rc = CU(cuMemAddressFree, (CUdeviceptr, size_t))(h->b, h->c);
        break;
    case ARRAY:
        rc = CU(cuArrayDestroy, (CUarray))((CUarray)(uintptr_t)h->a);
        break;
    case CONTEXT:
        rc = CU(cuCtxDestroy_v2, (CUcontext))((CUcontext)(uintptr_t)h->a);
        CU(cuCtxSetCurrent, (CUcontext))(primary);
        break;
    case MODULE:
        rc = CU(cuModuleUnload, (CUmodule))((CUmodule)(uintptr_t)h->a);
        break;
    case LIBRARY:
        rc = CU(cuLibraryUnload, (CUlibrary))((CUlibrary)(uintptr_t)h->a);
        break;
    case GRAPH:
        rc = CU(cuGraphExecDestroy, (CUgraphExec))((CUgraphExec)(uintptr_t)h->a);
        if (rc == CUDA_SUCCESS)
            rc = CU(cuGraphDestroy, (CUgraph))((CUgraph)(uintptr_t)h->b);
        break;
    }
    h->kind = NONE;
    return rc;
}

/* Load a kernel with local_kib KiB of local memory a thread (calling malloc when heap), kept as
 * a module in h, and launch it once: directly, or as the one kernel node of a graph. */
static CUresult load_and_launch(struct held *h, size_t local_kib, int heap, int graph)
{
    CUmodule m = NULL;
    CUfunction f = NULL;
    CUdeviceptr out = 0;
    unsigned idx = 0;
    void *params[] = {&out, &idx};
    CUresult rc = CU(cuModuleLoadData, (CUmodule *, const void *))(&m, ptx_with_local(local_kib << 10, heap));
    if (rc != CUDA_SUCCESS)
        return rc;
    *h = (struct held){MODULE, (uint64_t)(uintptr_t)m, 0, 0};
    rc = CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(&f, m, "lk");
    if (rc == CUDA_SUCCESS && !graph)
        rc = CU(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void **, void **))(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (rc == CUDA_SUCCESS && graph) {
        CUDA_KERNEL_NODE_PARAMS_v1 node = {f, 1, 1, 1, 32, 1, 1, 0, params, NULL};
        CUgraph g = NULL;
        CUgraphNode n = NULL;
        CUgraphExec e = NULL;
        CU(cuGraphCreate, (CUgraph *, unsigned))(&g, 0);
        rc = CU(cuGraphAddKernelNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const void *))(&n, g, NULL,
                                                                                                          0, &node);
        if (rc == CUDA_SUCCESS)
            rc = CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(&e, g, 0);
        if (rc == CUDA_SUCCESS) {
            rc = CU(cuGraphLaunch, (CUgraphExec, CUstream))(e, NULL);
            CU(cuGraphExecDestroy, (CUgraphExec))(e);
        }
        CU(cuGraphDestroy, (CUgraph))(g);
    }
    if (rc == CUDA_SUCCESS)
        rc = CU(cuCtxSynchronize, (void))();
    return rc;
}

/* One random step; returns the name of what it did, *rc its result. */
static const char *step(size_t maxmib, CUresult *rc)
{
    size_t mib = 1 + pick((unsigned)maxmib);
    size_t bytes = mib << 20;
    struct held *h = free_slot();
    unsigned op = pick(24);
    *rc = CUDA_SUCCESS;
    if (!h)
        op = 23; /* full: free something */
    CUdeviceptr p = 0;
    switch (op) {
    case 0:
        *rc = CU(cuMemAlloc_v2, (CUdeviceptr *, size_t))(&p, bytes);
        KEEP(LINEAR, p, 0, 0);
        return "cuMemAlloc_v2";
    case 1:
        *rc = CU(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned))(&p, bytes, 1);
        KEEP(LINEAR, p, 0, 0);
        return "cuMemAllocManaged";
    case 2: {
        size_t pitch = 0;
        *rc = CU(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned))(&p, &pitch, 1000, bytes / 1024,
                                                                                       4);
        KEEP(LINEAR, p, 0, 0);
        return "cuMemAllocPitch_v2";
    }
    case 3:
        *rc = CU(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))(&p, bytes, NULL);
        KEEP(ASYNC, p, 0, 0);
        return "cuMemAllocAsync";
    case 4:
        *rc = CU(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))(&p, bytes, made_pool, NULL);
        KEEP(ASYNC, p, 0, 0);
        return "cuMemAllocFromPoolAsync";
    case 5:
    case 6: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        size_t gran = 2 << 20;
        bytes = (bytes + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle handle = 0;
        CUdeviceptr va = 0;
        *rc = CU(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))(
            &handle, bytes, &prop, 0);
        if (*rc != CUDA_SUCCESS)
            return "cuMemCreate";
        CUresult r = CU(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))(
            &va, bytes, 0, 0, 0);
        if (r == CUDA_SUCCESS)
            r = CU(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))(va, bytes, 0,
                                                                                                         handle, 0);
        CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
        if (r == CUDA_SUCCESS)
            r = CU(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))(va, bytes, &access, 1);
        if (r == CUDA_SUCCESS && op == 6) /* the documented pattern: released while mapped */
            r = CU(cuMemRelease, (CUmemGenericAllocationHandle))(handle);
        *rc = r;
        KEEP(VMM, op == 6 ? 0 : handle, va, bytes);
        return op == 6 ? "cuMemCreate+map+release" : "cuMemCreate+map";
    }
    case 7: {
        CUDA_ARRAY_DESCRIPTOR d = {4096, bytes / (16 * 1024) ? bytes / (16 * 1024) : 1, CU_AD_FORMAT_FLOAT, 4};
        CUarray a = NULL;
        *rc = CU(cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))(&a, &d);
        KEEP(ARRAY, (uint64_t)(uintptr_t)a, 0, 0);
        return "cuArrayCreate_v2";
    }
    case 8: {
        CUdeviceptr_v1 p1 = 0;
        *rc = CU(cuMemAlloc, (CUdeviceptr_v1 *, unsigned))(&p1, (unsigned)bytes);
        KEEP(LINEAR1, p1, 0, 0);
        return "cuMemAlloc (v1)";
    }
    case 9: {
        CUcontext c = NULL;
        *rc = CU(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice))(&c, 0, 0);
        CU(cuCtxSetCurrent, (CUcontext))(primary);
        KEEP(CONTEXT, (uint64_t)(uintptr_t)c, 0, 0);
        return "cuCtxCreate_v2";
    }
    case 10: {
        CUmodule m = NULL;
        *rc = CU(cuModuleLoadData, (CUmodule *, const void *))(&m, ptx_with_global(mib / 2 + 1));
        KEEP(MODULE, (uint64_t)(uintptr_t)m, 0, 0);
        return "cuModuleLoadData";
    }
    case 11: {
        CUlibrary l = NULL;
        CUkernel k = NULL;
        CUfunction f = NULL;
        *rc = CU(cuLibraryLoadData, (CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned))(
            &l, ptx_with_global(mib / 2 + 1), NULL, NULL, 0, NULL, NULL, 0);
        if (*rc == CUDA_SUCCESS) {
            *h = (struct held){LIBRARY, (uint64_t)(uintptr_t)l, 0, 0};
            *rc = CU(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *))(&k, l, "k");
            if (*rc == CUDA_SUCCESS)
                *rc = CU(cuKernelGetFunction, (CUfunction *, CUkernel))(&f, k);
        }
        return "cuLibraryLoadData+GetKernel+GetFunction";
    }
    case 12: {
        CUgraph g = NULL;
        CUgraphExec e = NULL;
        CUgraphNode node = NULL;
        CUDA_MEM_ALLOC_NODE_PARAMS a;
        memset(&a, 0, sizeof a);
        a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.bytesize = bytes;
        CU(cuGraphCreate, (CUgraph *, unsigned))(&g, 0);
        CUresult r = CU(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                                 CUDA_MEM_ALLOC_NODE_PARAMS *))(&node, g, NULL, 0, &a);
        CUgraphNode fnode = NULL;
        if (r == CUDA_SUCCESS)
            r = CU(cuGraphAddMemFreeNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr))(
                &fnode, g, &node, 1, a.dptr);
        if (r == CUDA_SUCCESS)
            r = CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(&e, g, 0);
        if (r == CUDA_SUCCESS) {
            *h = (struct held){GRAPH, (uint64_t)(uintptr_t)e, (uint64_t)(uintptr_t)g, 0};
            r = CU(cuGraphLaunch, (CUgraphExec, CUstream))(e, NULL);
            if (r == CUDA_SUCCESS)
                r = CU(cuCtxSynchronize, (void))();
        } else {
            CU(cuGraphDestroy, (CUgraph))(g);
        }
        *rc = r;
        return "graph instantiate+launch";
    }
    case 13: {
        CUmemoryPool pool = pick(2) ? made_pool : NULL;
        if (!pool)
            CU(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
        *rc = CU(cuMemPoolTrimTo, (CUmemoryPool, size_t))(pool, 0);
        return "cuMemPoolTrimTo";
    }
    case 14: {
        CUmemoryPool pool = NULL;
        CU(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
        unsigned long long v = pick(2) ? ~0ULL : 0;
        *rc = CU(cuMemPoolSetAttribute, (CUmemoryPool, int, void *))(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        return v ? "release threshold UINT64_MAX" : "release threshold 0";
    }
    case 15:
        *rc = CU(cuCtxSynchronize, (void))();
        return "cuCtxSynchronize";
    case 16:
        *rc = CU(cuDeviceGraphMemTrim, (CUdevice))(0);
        return "cuDeviceGraphMemTrim";
    case 17:
        *rc = CU(cuCtxSetLimit, (int, size_t))(CU_LIMIT_STACK_SIZE, pick(2) ? 1024 : (size_t)(1 + pick(8)) << 10);
        return "cuCtxSetLimit(STACK_SIZE)";
    case 18: /* a kernel's local memory: the launch grows the stack of every resident thread */
        *rc = load_and_launch(h, 1 + pick(16), 0, 0);
        return "kernel with local memory: load+launch";
    case 19:
        *rc = load_and_launch(h, 1 + pick(16), 0, 1);
        return "kernel with local memory: graph instantiate+launch";
    case 20: /* the device heap: set (while it can be), then taken by a kernel that calls malloc */
        if (!heap_fixed) {
            *rc = CU(cuCtxSetLimit, (int, size_t))(CU_LIMIT_MALLOC_HEAP_SIZE, bytes);
            if (*rc != CUDA_SUCCESS || pick(2))
                return "cuCtxSetLimit(MALLOC_HEAP_SIZE)";
        }
        *rc = load_and_launch(h, 1, 1, 0);
        heap_fixed |= *rc == CUDA_SUCCESS;
        return "kernel that calls malloc: load+launch";
    default: { /* free a random held thing */
        int n = 0, live[HELD];
        for (int i = 0; i < HELD; i++)
            if (held[i].kind != NONE)
                live[n++] = i;
        if (!n)
            return "nothing to free";
        *rc = release(&held[live[pick((unsigned)n)]]);
        return "free";
    }
    }
}

static int worker(int id, unsigned s, long steps, const char *turnfile, size_t maxmib)
{
    struct turns *t = map_turns(turnfile);
    int verbose = getenv("TRUTH_VERBOSE") != NULL;
    seed = s * 2654435761u + (unsigned)id;
    setvbuf(stdout, NULL, _IOLBF, 0);
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("dlopen libcuda.so.1: %s\n", dlerror());
        return 3;
    }
    CUresult rc = CU(cuInit, (unsigned))(0);
    if (rc == CUDA_SUCCESS)
        rc = CU(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))(&primary, 0);
    if (rc == CUDA_SUCCESS)
        rc = CU(cuCtxSetCurrent, (CUcontext))(primary);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    if (rc == CUDA_SUCCESS)
        rc = CU(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))(&made_pool, &props);
    if (rc != CUDA_SUCCESS) {
        printf("worker %d: CUDA set-up failed: %d\n", id, rc);
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return 1;
    }
    t->pid[id] = (uint32_t)getpid();
    __atomic_store_n(&t->ready[id], 1, __ATOMIC_RELEASE);
    for (long k = id; k < steps; k += 2) {
        if (wait_turn(t, 2 * (uint64_t)k) != 0)
            return 1;
        const char *what = step(maxmib, &rc);
        if (rc == CUDA_SUCCESS)
            ok++;
        else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            oom++;
        else if (rc == CUDA_ERROR_INVALID_CONTEXT && strstr(what, "(v1)"))
            unserved++; /* 64-bit drivers such as 580 no longer serve the 32-bit entry points */
        else
            other++;
        if (rc != CUDA_SUCCESS || verbose)
            printf("step %ld worker %d: %s -> %d%s\n", k, id, what, rc,
                   rc == CUDA_ERROR_OUT_OF_MEMORY || rc == CUDA_SUCCESS ? "" : " (not OOM)");
        __atomic_store_n(&t->turn, 2 * (uint64_t)k + 1, __ATOMIC_RELEASE);
    }
    printf("random worker=%d seed=%u steps=%ld ok=%ld oom=%ld other=%ld unserved=%ld\n", id, s, (steps - id + 1) / 2, ok,
           oom, other, unserved);
    return other ? 1 : 0;
}

/* ---------------------------------------------------------------- the checker */
static int checker(long steps, const char *turnfile, unsigned long long limit_mib)
{
    struct turns *t = map_turns(turnfile);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *path = getenv("TRUTH_NVML");
    void *nvml = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW);
    void *init = nvml ? dlsym(nvml, "nvmlInit_v2") : NULL;
    void *get = nvml ? dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    void *procs = nvml ? dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3") : NULL;
    nvmlDevice_t dev = NULL;
    if (!procs || ((nvmlReturn_t(*)(void))init)() != NVML_SUCCESS
        || ((nvmlReturn_t(*)(unsigned, nvmlDevice_t *))get)(0, &dev) != NVML_SUCCESS) {
        printf("checker: NVML unusable (%s)\n", nvml ? "init" : dlerror());
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return 1;
    }
    while (!__atomic_load_n(&t->ready[0], __ATOMIC_ACQUIRE) || !__atomic_load_n(&t->ready[1], __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&t->failed, __ATOMIC_RELAXED))
            return 1;
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    long violations = 0;
    unsigned long long peak = 0;
    int verbose = getenv("TRUTH_VERBOSE") != NULL;
    const char *stats = getenv("TRUTH_STATS");
    for (long k = 0; k < steps; k++) {
        if (wait_turn(t, 2 * (uint64_t)k + 1) != 0)
            return 1;
        struct {
            unsigned pid;
            unsigned long long used;
            unsigned gi, ci;
        } rows[256];
        unsigned n = 256;
        unsigned long long per[2] = {0, 0};
        if (((nvmlReturn_t(*)(nvmlDevice_t, unsigned *, void *))procs)(dev, &n, rows) == NVML_SUCCESS)
            for (unsigned i = 0; i < n; i++)
                for (int w = 0; w < 2; w++)
                    if (rows[i].pid == t->pid[w])
                        per[w] += rows[i].used == ~0ULL ? 0 : rows[i].used;
        unsigned long long sum = (per[0] + per[1]) >> 20;
        if (verbose) /* each worker's share: which one grew, and by how much */
            printf("step %ld: GPU w0=%llu w1=%llu MiB\n", k, per[0] >> 20, per[1] >> 20);
        if (sum > peak)
            peak = sum;
        if (sum > limit_mib) {
            violations++;
            printf("step %ld: the GPU holds %llu MiB for the container, more than %llu\n", k, sum, limit_mib);
            if (violations == 1 && stats && *stats) { /* libvgpu's own count at that moment */
                fflush(stdout);
                if (system(stats) != 0)
                    printf("checker: %s failed\n", stats);
            }
        }
        __atomic_store_n(&t->turn, 2 * (uint64_t)k + 2, __ATOMIC_RELEASE);
    }
    printf("random checked=%ld violations=%ld peak=%llu limit=%llu\n", steps, violations, peak, limit_mib);
    return violations ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "worker"))
        return worker(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10), atol(argv[4]), argv[5],
                      (size_t)atol(argv[6]));
    if (argc == 5 && !strcmp(argv[1], "checker"))
        return checker(atol(argv[2]), argv[3], strtoull(argv[4], NULL, 10));
    fprintf(stderr, "usage: truth_random worker ID SEED STEPS TURNFILE MAXMIB | checker STEPS TURNFILE LIMIT_MIB\n");
    return 2;
}
