/* Test client: drives the driver API through libcuda.so.1 / libnvidia-ml.so.1 as the loader
 * finds them (the shim via LD_LIBRARY_PATH, or the fake with libvgpu.so preloaded).
 * Steps from argv, each printing one line that run-tests.sh checks:
 *   init | alloc:MIB[:api] | free:N | freeall | info | infonull | totalmem | nvml | ctx |
 *   free-sync:N | free-async:N (allocation N freed by cuMemFree_v2 / cuMemFreeAsync, whatever made it) |
 *   threads:T:ROUNDS (stream-ordered pairs from T threads, each freeing the previous one's) | ctx-none |
 *   hold:SEC | launch:N | rawfree | forward | missing | hammer:ITER:MAXMIB | pitch:W:H |
 *   devices | use:ORDINAL | nvml-devices | nvml-procs |
 *   graph:MIB:MODE (MODE keep, free, auto, v2, params, gpa) | launch-graph:N | exec-destroy:N |
 *   graph-destroy:N | trim | graph-attr | capture:MIB:keep|free | capture-only:MIB | capture-free:N |
 *   free-graph-ptr:N
 *   truth | threshold:max|MIB | sync | ssync | pool-trim:MIB | pool-create | pool-set | pool-set13 |
 *   pool-default | pool-destroy | pool-share:N | vmm:MIB:keep|release | unmap:N | release:N |
 *   retain:N | export:N | import:N | mcast:N | mcast-addr:N | maparray:N | ctxs:N | ctx-destroy-all |
 *   module:MIB[:data|ex|fatbin|file] | unload:N | library:MIB[:get|module|lazy|file] | lib-unload:N |
 *   stack:KIB | heap:MIB | ipc-get:N:FILE | ipc-open:FILE | ipc-close | hostalloc:MIB | abs-alloc:MIB |
 *   linger:SEC (at exit, alive SEC s more after libvgpu's destructor: $VGPU_TEST_LINGER_LIB) |
 *   fork-orphan:SEC (a child holding the driver's file descriptors SEC s, the parent going on) |
 *   kernel:KIB[:MODE] | launch-k:N[:HOW] (client_launch.c)
 * api: v2 managed async async_ptsz pool pool_ptsz mypool create create_host array array3d mipmap
 *      v1 pitch1 array1 array3d1 (the 32-bit entry points without _v2)
 *      gpa gpa2 gpa2_ptsz (cuMemAlloc obtained through cuGetProcAddress / _v2, PTDS flag)
 * "truth" prints what the GPU holds for this process (the fake driver's own count, which fake
 * NVML reports), read past libvgpu. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "ptx.h"

static void *cuda, *nvml;
static void *fn(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("missing-symbol %s\n", name);
        exit(3);
    }
    return p;
}
void *client_cuda_fn(const char *name)
{
    return fn(cuda, name);
}
#define NV(name, args) ((nvmlReturn_t(*) args)fn(nvml, #name))

struct alloc {
    char api[16];
    uint64_t key;
    int live;
};
static struct alloc allocs[4096];
static int nallocs;
static void *early_launch;

/* Graphs made by the graph and capture steps, by number. */
struct graph {
    CUgraph graph;
    CUgraphExec exec;
    CUdeviceptr dptr;
};
static struct graph graphs[64];
static int ngraphs;

/* Virtual memory mappings made by vmm steps, by number. */
struct vmm {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle, retained, imported;
    int fd;
};
static struct vmm vmms[64];
static int nvmms;
static CUmemoryPool made_pool;
static CUmodule modules[64];
static int nmodules;
static CUlibrary libraries[64];
static int nlibraries;
static CUcontext contexts[64];
static int ncontexts;
static CUdeviceptr ipc_opened;


/* What the GPU holds for this process: the fake driver's own count (what fake NVML reports),
 * asked past libvgpu. */
static unsigned long long truth_mib(void)
{
    void *fake = dlopen(getenv("FAKE_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
    void *fn = fake ? dlsym(fake, "fake_gpu_self_bytes") : NULL;
    return fn ? ((unsigned long long (*)(int))fn)(0) >> 20 : 0;
}

static CUresult vmm_step(size_t mib, const char *mode)
{
    struct vmm *v = &vmms[nvmms % 64];
    memset(v, 0, sizeof *v);
    v->fd = -1;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    v->size = mib << 20;
    CUresult rc = CU(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                   unsigned long long))(&v->handle, v->size, &prop, 0);
    if (rc == CUDA_SUCCESS)
        rc = CU(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))(&v->va, v->size,
                                                                                                    0, 0, 0);
    if (rc == CUDA_SUCCESS)
        rc = CU(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))(
            v->va, v->size, 0, v->handle, 0);
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
        rc = CU(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))(v->va, v->size, &access, 1);
    }
    if (rc == CUDA_SUCCESS && !strcmp(mode, "release"))
        rc = CU(cuMemRelease, (CUmemGenericAllocationHandle))(v->handle);
    if (rc == CUDA_SUCCESS)
        nvmms++;
    return rc;
}

/* graph:MIB:MODE: one allocation node of MIB on the current device, its free node too with
 * "free"; instantiated through cuGraphInstantiateWithFlags (AUTO_FREE_ON_LAUNCH with "auto"),
 * cuGraphInstantiate_v2 ("v2"), WithParams ("params") or cuGetProcAddress("cuGraphInstantiate")
 * ("gpa"). Prints the instantiation's result. */
static void graph_step(size_t mib, const char *mode)
{
    struct graph *g = &graphs[ngraphs++ % 64];
    memset(g, 0, sizeof *g);
    CUgraphNode alloc = NULL, freen = NULL;
    CUDA_MEM_ALLOC_NODE_PARAMS a;
    memset(&a, 0, sizeof a);
    CUdevice dev = 0;
    CU(cuCtxGetDevice, (CUdevice *))(&dev);
    a.poolProps.allocType = 1;
    a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.poolProps.location.id = dev;
    a.bytesize = mib << 20;
    CUresult rb = CU(cuGraphCreate, (CUgraph *, unsigned))(&g->graph, 0);
    if (rb == CUDA_SUCCESS)
        rb = CU(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                         CUDA_MEM_ALLOC_NODE_PARAMS *))(&alloc, g->graph, NULL, 0, &a);
    g->dptr = a.dptr;
    if (rb == CUDA_SUCCESS && !strcmp(mode, "free"))
        rb = CU(cuGraphAddMemFreeNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr))(
            &freen, g->graph, &alloc, 1, a.dptr);
    CUresult ri;
    if (!strcmp(mode, "v2")) {
        ri = CU(cuGraphInstantiate_v2, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))(&g->exec, g->graph,
                                                                                               NULL, NULL, 0);
    } else if (!strcmp(mode, "params")) {
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        memset(&ip, 0, sizeof ip);
        ri = CU(cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))(
            &g->exec, g->graph, &ip);
    } else if (!strcmp(mode, "gpa")) {
        void *f = NULL;
        ri = CU(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *))("cuGraphInstantiate", &f, 12000,
                                                                                      0, NULL);
        if (ri == CUDA_SUCCESS)
            ri = ((CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))f)(&g->exec, g->graph, 0);
    } else {
        ri = CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(
            &g->exec, g->graph, !strcmp(mode, "auto") ? CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH : 0);
    }
    printf("graph %zu %s build=%d rc=%d\n", mib, mode, rb, ri);
}

/* capture:MIB:keep|free (instantiated like PyTorch does, AUTO_FREE_ON_LAUNCH), capture-only:MIB
 * (not instantiated), capture-free:N (a captured free of allocation N, not instantiated). */
static void capture_step(const char *what, size_t mib, const char *mode, CUdeviceptr free_ptr)
{
    struct graph *g = &graphs[ngraphs++ % 64];
    memset(g, 0, sizeof *g);
    CUstream s = NULL;
    CUresult ra = 0, rf = 0, ri = 0;
    CUresult rs = CU(cuStreamCreate, (CUstream *, unsigned))(&s, 1);
    CUresult rc = rs ? rs : CU(cuStreamBeginCapture_v2, (CUstream, int))(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (!strcmp(what, "capture-free")) {
        rf = CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(free_ptr, s);
    } else {
        ra = CU(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))(&g->dptr, mib << 20, s);
        if (ra == CUDA_SUCCESS && mode && !strcmp(mode, "free"))
            rf = CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(g->dptr, s);
    }
    CUresult re = CU(cuStreamEndCapture, (CUstream, CUgraph *))(s, &g->graph);
    if (!strcmp(what, "capture") && re == CUDA_SUCCESS)
        ri = CU(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))(
            &g->exec, g->graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    printf("%s %zu begin=%d alloc=%d free=%d end=%d inst=%d\n", what, mib, rc, ra, rf, re, ri);
}

static CUresult do_alloc(const char *api, size_t bytes, uint64_t *key)
{
    CUdeviceptr p = 0;
    CUresult rc;
    if (!strcmp(api, "v2")) {
        rc = CU(cuMemAlloc_v2, (CUdeviceptr *, size_t))(&p, bytes);
    } else if (!strcmp(api, "managed")) {
        rc = CU(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned))(&p, bytes, 1);
    } else if (!strcmp(api, "async") || !strcmp(api, "async_ptsz")) {
        rc = (!strcmp(api, "async") ? CU(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))
                                    : CU(cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream)))(&p, bytes, NULL);
    } else if (!strcmp(api, "mypool")) {
        rc = CU(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))(&p, bytes, made_pool, NULL);
    } else if (!strcmp(api, "v1")) {
        CUdeviceptr_v1 p1 = 0;
        rc = CU(cuMemAlloc, (CUdeviceptr_v1 *, unsigned))(&p1, (unsigned)bytes);
        p = p1;
    } else if (!strcmp(api, "pitch1")) {
        CUdeviceptr_v1 p1 = 0;
        unsigned pitch = 0;
        rc = CU(cuMemAllocPitch, (CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned))(
            &p1, &pitch, 1024, (unsigned)(bytes / 1024), 4);
        p = p1;
    } else if (!strcmp(api, "array1")) {
        CUDA_ARRAY_DESCRIPTOR_v1 d = {(unsigned)(bytes / (16 * 1024)), 1024, CU_AD_FORMAT_FLOAT, 4};
        CUarray a = NULL;
        rc = CU(cuArrayCreate, (CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *))(&a, &d);
        p = (uint64_t)(uintptr_t)a;
    } else if (!strcmp(api, "array3d1")) {
        CUDA_ARRAY3D_DESCRIPTOR_v1 d = {1024, 1024, (unsigned)(bytes / (4 << 20)), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        CUarray a = NULL;
        rc = CU(cuArray3DCreate, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *))(&a, &d);
        p = (uint64_t)(uintptr_t)a;
    } else if (!strcmp(api, "pool") || !strcmp(api, "pool_ptsz")) {
        CUmemoryPool pool;
        CU(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
        rc = (!strcmp(api, "pool") ? CU(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))
                                   : CU(cuMemAllocFromPoolAsync_ptsz,
                                        (CUdeviceptr *, size_t, CUmemoryPool, CUstream)))(&p, bytes, pool, NULL);
    } else if (!strcmp(api, "create") || !strcmp(api, "create_host")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = 1;
        prop.location.type = !strcmp(api, "create") ? CU_MEM_LOCATION_TYPE_DEVICE : 2 /* HOST */;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h = 0;
        rc = CU(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long))(&h, bytes, &prop, 0);
        p = h;
    } else if (!strcmp(api, "array")) {
        CUDA_ARRAY_DESCRIPTOR d = {bytes / (16 * 1024), 1024, CU_AD_FORMAT_FLOAT, 4};
        CUarray a = NULL;
        rc = CU(cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))(&a, &d);
        p = (uint64_t)(uintptr_t)a;
    } else if (!strcmp(api, "array3d")) {
        CUDA_ARRAY3D_DESCRIPTOR d = {1024, 1024, bytes / (4 << 20), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        CUarray a = NULL;
        rc = CU(cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))(&a, &d);
        p = (uint64_t)(uintptr_t)a;
    } else if (!strcmp(api, "mipmap")) {
        /* one level: exactly the size asked for (a multiple of 4 MiB) */
        CUDA_ARRAY3D_DESCRIPTOR d = {1024, 1024, bytes / (4 << 20), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        CUmipmappedArray a = NULL;
        rc = CU(cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned))(&a, &d, 1);
        p = (uint64_t)(uintptr_t)a;
    } else if (!strncmp(api, "gpa", 3)) {
        void *f = NULL;
        CUresult g;
        if (!strcmp(api, "gpa"))
            g = CU(cuGetProcAddress, (const char *, void **, int, cuuint64_t))("cuMemAlloc", &f, 12000, 0);
        else {
            int status = -1;
            g = CU(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *))(
                "cuMemAllocAsync", &f, 13000,
                !strcmp(api, "gpa2_ptsz") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &status);
        }
        if (g != CUDA_SUCCESS)
            return g;
        if (!strcmp(api, "gpa"))
            rc = ((CUresult(*)(CUdeviceptr *, size_t))f)(&p, bytes);
        else
            rc = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))f)(&p, bytes, NULL);
    } else {
        printf("unknown api %s\n", api);
        exit(3);
    }
    *key = p;
    return rc;
}

static CUresult do_free(struct alloc *a)
{
    const char *api = a->api;
    if (!strcmp(api, "create") || !strcmp(api, "create_host"))
        return CU(cuMemRelease, (CUmemGenericAllocationHandle))(a->key);
    if (!strcmp(api, "array") || !strcmp(api, "array3d") || !strcmp(api, "array1") || !strcmp(api, "array3d1"))
        return CU(cuArrayDestroy, (CUarray))((CUarray)(uintptr_t)a->key);
    if (!strcmp(api, "v1") || !strcmp(api, "pitch1"))
        return CU(cuMemFree, (CUdeviceptr_v1))((CUdeviceptr_v1)a->key);
    if (!strcmp(api, "mypool"))
        return CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(a->key, NULL);
    if (!strcmp(api, "mipmap"))
        return CU(cuMipmappedArrayDestroy, (CUmipmappedArray))((CUmipmappedArray)(uintptr_t)a->key);
    if (!strncmp(api, "async", 5) || !strncmp(api, "pool", 4) || !strncmp(api, "gpa2", 4))
        return (strstr(api, "ptsz") ? CU(cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))
                                    : CU(cuMemFreeAsync, (CUdeviceptr, CUstream)))(a->key, NULL);
    return CU(cuMemFree_v2, (CUdeviceptr))(a->key);
}

/* ---- threads: stream-ordered pairs from several threads at once ---- */
#define PAIR_THREADS_MAX 16
#define PAIR_PTRS 32
struct pair_thread {
    CUcontext ctx;
    int id, threads, rounds, failures;
    pthread_barrier_t *barrier;
    CUdeviceptr ptrs[PAIR_PTRS]; /* made by this thread, freed by the next one */
    struct pair_thread *all;
};

/* Each round: PAIR_PTRS allocations of 1 MiB on this thread's stream, a barrier, then the frees
 * of the previous thread's allocations on this thread's stream (another thread, another stream),
 * and 64 pairs allocated and freed at once. */
static void *pair_worker(void *arg)
{
    struct pair_thread *t = arg;
    CUstream stream = NULL;
    if (CU(cuCtxSetCurrent, (CUcontext))(t->ctx) != CUDA_SUCCESS
        || CU(cuStreamCreate, (CUstream *, unsigned))(&stream, 1) != CUDA_SUCCESS) {
        t->failures++;
        return NULL;
    }
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = CU_AS(cuMemAllocAsync, CUresult(*)(CUdeviceptr *, size_t, CUstream));
    CUresult (*release)(CUdeviceptr, CUstream) = CU_AS(cuMemFreeAsync, CUresult(*)(CUdeviceptr, CUstream));
    struct pair_thread *prev = &t->all[(t->id + t->threads - 1) % t->threads];
    for (int r = 0; r < t->rounds; r++) {
        for (int i = 0; i < PAIR_PTRS; i++)
            if (alloc(&t->ptrs[i], 1 << 20, stream) != CUDA_SUCCESS) {
                t->ptrs[i] = 0;
                t->failures++;
            }
        pthread_barrier_wait(t->barrier);
        for (int i = 0; i < PAIR_PTRS; i++)
            if (prev->ptrs[i] && release(prev->ptrs[i], stream) != CUDA_SUCCESS)
                t->failures++;
        for (int i = 0; i < 64; i++) {
            CUdeviceptr p = 0;
            if (alloc(&p, 1 << 20, stream) != CUDA_SUCCESS || release(p, stream) != CUDA_SUCCESS)
                t->failures++;
        }
        pthread_barrier_wait(t->barrier);
    }
    CU(cuStreamSynchronize, (CUstream))(stream);
    return NULL;
}

static void pair_threads(int threads, int rounds)
{
    struct pair_thread t[PAIR_THREADS_MAX];
    pthread_t tid[PAIR_THREADS_MAX];
    pthread_barrier_t barrier;
    CUcontext ctx = NULL;
    CU(cuCtxGetCurrent, (CUcontext *))(&ctx);
    if (threads < 1 || threads > PAIR_THREADS_MAX)
        threads = PAIR_THREADS_MAX;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    int failures = 0;
    for (int i = 0; i < threads; i++)
        t[i] = (struct pair_thread){.ctx = ctx, .id = i, .threads = threads, .rounds = rounds, .barrier = &barrier,
                                    .all = t};
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, pair_worker, &t[i]);
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        failures += t[i].failures;
    }
    pthread_barrier_destroy(&barrier);
    printf("threads %d rounds %d failures=%d\n", threads, rounds, failures);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("dlopen libcuda.so.1: %s\n", dlerror());
        return 3;
    }
    for (int i = 1; i < argc; i++) {
        char step[256];
        snprintf(step, sizeof step, "%s", argv[i]);
        char *arg1 = strchr(step, ':'), *arg2 = NULL;
        if (arg1) {
            *arg1++ = '\0';
            arg2 = strchr(arg1, ':');
            if (arg2)
                *arg2++ = '\0';
        }
        if (client_launch_step(step, arg1, arg2)) {
        } else if (!strcmp(step, "init")) {
            CUresult rc = CU(cuInit, (unsigned))(0);
            CUcontext c = NULL;
            if (rc == CUDA_SUCCESS)
                rc = CU(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))(&c, 0);
            if (rc == CUDA_SUCCESS)
                rc = CU(cuCtxSetCurrent, (CUcontext))(c);
            printf("init rc=%d\n", rc);
        } else if (!strcmp(step, "alloc")) {
            size_t mib = (size_t)atol(arg1);
            const char *api = arg2 ? arg2 : "v2";
            uint64_t key = 0;
            CUresult rc = do_alloc(api, mib << 20, &key);
            if (rc == CUDA_SUCCESS && nallocs < 4096) {
                snprintf(allocs[nallocs].api, sizeof allocs[nallocs].api, "%s", api);
                allocs[nallocs].key = key;
                allocs[nallocs++].live = 1;
            }
            printf("alloc %zu %s rc=%d\n", mib, api, rc);
        } else if (!strcmp(step, "free")) {
            int n = atoi(arg1);
            CUresult rc = n < nallocs && allocs[n].live ? do_free(&allocs[n]) : -1;
            if (rc == CUDA_SUCCESS)
                allocs[n].live = 0;
            printf("free %d rc=%d\n", n, rc);
        } else if (!strcmp(step, "freeall")) {
            int bad = 0;
            for (int k = 0; k < nallocs; k++)
                if (allocs[k].live && do_free(&allocs[k]) != CUDA_SUCCESS)
                    bad++;
                else
                    allocs[k].live = 0;
            printf("freeall failures=%d\n", bad);
        } else if (!strcmp(step, "info")) {
            size_t f = 0, t = 0;
            CUresult rc = CU(cuMemGetInfo_v2, (size_t *, size_t *))(&f, &t);
            printf("info rc=%d free=%zu total=%zu\n", rc, f >> 20, t >> 20);
        } else if (!strcmp(step, "infonull")) {
            size_t t = 0;
            CUresult rc1 = CU(cuMemGetInfo_v2, (size_t *, size_t *))(NULL, &t);
            CUresult rc2 = CU(cuMemGetInfo_v2, (size_t *, size_t *))(NULL, NULL);
            printf("infonull rc=%d total=%zu rc_both_null=%d\n", rc1, t >> 20, rc2);
        } else if (!strcmp(step, "totalmem")) {
            size_t t = 0;
            CUresult rc = CU(cuDeviceTotalMem_v2, (size_t *, CUdevice))(&t, 0);
            printf("totalmem rc=%d total=%zu\n", rc, t >> 20);
        } else if (!strcmp(step, "nvml")) {
            nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
            if (!nvml) {
                printf("dlopen libnvidia-ml.so.1: %s\n", dlerror());
                return 3;
            }
            nvmlReturn_t rc = NV(nvmlInit_v2, (void))();
            nvmlDevice_t d = NULL;
            if (rc == NVML_SUCCESS)
                rc = NV(nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *))(0, &d);
            nvmlMemory_t m = {0, 0, 0};
            nvmlMemory_v2_t m2;
            memset(&m2, 0, sizeof m2);
            m2.version = (unsigned)(sizeof m2 | 2u << 24);
            nvmlReturn_t r1 = rc ? rc : NV(nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *))(d, &m);
            nvmlReturn_t r2 = rc ? rc : NV(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t *))(d, &m2);
            const char *es = ((const char *(*)(nvmlReturn_t))fn(nvml, "nvmlErrorString"))(r1);
            printf("nvml rc=%d total=%llu used=%llu free=%llu (%s)\n", r1, m.total >> 20, m.used >> 20, m.free >> 20,
                   es);
            printf("nvml2 rc=%d total=%llu used=%llu reserved=%llu free=%llu\n", r2, m2.total >> 20, m2.used >> 20,
                   m2.reserved >> 20, m2.free >> 20);
        } else if (!strcmp(step, "procs")) {
            nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
            NV(nvmlInit_v2, (void))();
            nvmlDevice_t d = NULL;
            NV(nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *))(0, &d);
            struct {
                unsigned pid;
                unsigned long long used;
                unsigned gi, ci;
            } info[4];
            unsigned n = 4;
            nvmlReturn_t rc = NV(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *))(d, &n, info);
            printf("procs rc=%d n=%u self=%d used=%llu\n", rc, n, n && info[0].pid == (unsigned)getpid(),
                   n ? info[0].used >> 20 : 0);
        } else if (!strcmp(step, "devices")) {
            /* what CUDA shows: ordinals, UUIDs, sizes */
            int n = 0;
            CUresult rc = CU(cuDeviceGetCount, (int *))(&n);
            printf("devices rc=%d n=%d", rc, n);
            for (int d = 0; d < n; d++) {
                CUuuid u;
                size_t t = 0;
                char name[64] = "";
                CU(cuDeviceGetUuid, (CUuuid *, CUdevice))(&u, d);
                CU(cuDeviceTotalMem_v2, (size_t *, CUdevice))(&t, d);
                CU(cuDeviceGetName, (char *, int, CUdevice))(name, sizeof name, d);
                const unsigned char *b = (const unsigned char *)u.bytes;
                printf(" %d:GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x:%zu:%s", d, b[0], b[1],
                       b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15], t >> 20,
                       name);
            }
            printf("\n");
        } else if (!strcmp(step, "use")) {
            /* make ORDINAL's primary context current: later steps run on that device */
            CUcontext c = NULL;
            CUresult rc = CU(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))(&c, atoi(arg1));
            if (rc == CUDA_SUCCESS)
                rc = CU(cuCtxSetCurrent, (CUcontext))(c);
            printf("use %d rc=%d\n", atoi(arg1), rc);
        } else if (!strcmp(step, "nvml-devices")) {
            /* every call the Python components make through pynvml, on every device */
            nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
            if (!nvml) {
                printf("dlopen libnvidia-ml.so.1: %s\n", dlerror());
                return 3;
            }
            unsigned n = 0;
            char drv[32] = "";
            int cuda_v = 0;
            nvmlReturn_t rc = NV(nvmlInitWithFlags, (unsigned))(0);
            nvmlReturn_t rn = rc ? rc : NV(nvmlDeviceGetCount_v2, (unsigned *))(&n);
            NV(nvmlSystemGetDriverVersion, (char *, unsigned))(drv, sizeof drv);
            NV(nvmlSystemGetCudaDriverVersion, (int *))(&cuda_v);
            printf("nvml-devices rc=%d count_rc=%d n=%u driver=%s cuda=%d\n", rc, rn, n, drv, cuda_v);
            void *events = NULL;
            nvmlReturn_t re = NV(nvmlEventSetCreate, (void **))(&events);
            for (unsigned g = 0; g < n; g++) {
                nvmlDevice_t d = NULL;
                char uuid[96] = "", name[96] = "";
                unsigned idx = 99, minor = 99, mode = 99, persist = 99;
                nvmlMemory_t m = {0, 0, 0};
                struct {
                    char legacy[16];
                    unsigned domain, bus, device, id, sub;
                    char bus_id[32];
                } pci;
                memset(&pci, 0, sizeof pci);
                int bad = NV(nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *))(g, &d) != 0;
                bad += NV(nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned))(d, uuid, sizeof uuid) != 0;
                bad += NV(nvmlDeviceGetName, (nvmlDevice_t, char *, unsigned))(d, name, sizeof name) != 0;
                bad += NV(nvmlDeviceGetIndex, (nvmlDevice_t, unsigned *))(d, &idx) != 0;
                bad += NV(nvmlDeviceGetMinorNumber, (nvmlDevice_t, unsigned *))(d, &minor) != 0;
                bad += NV(nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *))(d, &m) != 0;
                bad += NV(nvmlDeviceGetPciInfo_v3, (nvmlDevice_t, void *))(d, &pci) != 0;
                bad += NV(nvmlDeviceGetPersistenceMode, (nvmlDevice_t, unsigned *))(d, &persist) != 0;
                bad += NV(nvmlDeviceSetComputeMode, (nvmlDevice_t, unsigned))(d, 3) != 0;
                bad += NV(nvmlDeviceGetComputeMode, (nvmlDevice_t, unsigned *))(d, &mode) != 0 || mode != 3;
                bad += NV(nvmlDeviceSetComputeMode, (nvmlDevice_t, unsigned))(d, 0) != 0;
                bad += NV(nvmlDeviceRegisterEvents, (nvmlDevice_t, unsigned long long, void *))(d, 8, events) != 0;
                nvmlDevice_t by_uuid = NULL;
                bad += NV(nvmlDeviceGetHandleByUUID, (const char *, nvmlDevice_t *))(uuid, &by_uuid) != 0 || by_uuid != d;
                unsigned cur = 9, pend = 9;
                nvmlReturn_t mig = NV(nvmlDeviceGetMigMode, (nvmlDevice_t, unsigned *, unsigned *))(d, &cur, &pend);
                printf("nvml-device %u index=%u uuid=%s name=%s minor=%u total=%llu used=%llu bus=%s persistence=%u "
                       "mig_rc=%d failures=%d\n",
                       g, idx, uuid, name, minor, m.total >> 20, m.used >> 20, pci.bus_id, persist, mig, bad);
            }
            struct {
                void *device;
                unsigned long long type, data;
                unsigned gi, ci;
            } ev;
            nvmlReturn_t rw = NV(nvmlEventSetWait_v2, (void *, void *, unsigned))(events, &ev, 20);
            nvmlReturn_t rf = NV(nvmlEventSetFree, (void *))(events);
            const char *timeout_text = ((const char *(*)(nvmlReturn_t))fn(nvml, "nvmlErrorString"))(rw);
            printf("nvml-events create=%d wait=%d (%s) free=%d shutdown=%d\n", re, rw, timeout_text, rf,
                   NV(nvmlShutdown, (void))());
        } else if (!strcmp(step, "nvml-procs")) {
            /* pynvml's two calls: the count first (no buffer), then the rows */
            nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
            NV(nvmlInit_v2, (void))();
            nvmlDevice_t d = NULL;
            NV(nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *))(arg1 ? (unsigned)atoi(arg1) : 0, &d);
            unsigned n = 0;
            nvmlReturn_t r1 = NV(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *))(d, &n, NULL);
            struct {
                unsigned pid;
                unsigned long long used;
                unsigned gi, ci;
            } info[16];
            unsigned cap = 16;
            nvmlReturn_t r2 = NV(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *))(d, &cap, info);
            printf("nvml-procs first=%d n=%u second=%d rows=%u", r1, n, r2, cap);
            for (unsigned k = 0; r2 == 0 && k < cap; k++)
                printf(" pid=%u:%llu", info[k].pid, info[k].used >> 20);
            printf("\n");
        } else if (!strcmp(step, "graph")) {
            graph_step((size_t)atol(arg1), arg2 ? arg2 : "keep");
        } else if (!strcmp(step, "capture") || !strcmp(step, "capture-only")) {
            capture_step(step, (size_t)atol(arg1), arg2, 0);
        } else if (!strcmp(step, "capture-free")) {
            int n = atoi(arg1);
            capture_step(step, 0, NULL, n < nallocs ? allocs[n].key : 0);
        } else if (!strcmp(step, "launch-graph")) {
            int n = atoi(arg1);
            printf("launch-graph %d rc=%d\n", n, CU(cuGraphLaunch, (CUgraphExec, CUstream))(graphs[n].exec, NULL));
        } else if (!strcmp(step, "exec-destroy")) {
            int n = atoi(arg1);
            printf("exec-destroy %d rc=%d\n", n, CU(cuGraphExecDestroy, (CUgraphExec))(graphs[n].exec));
        } else if (!strcmp(step, "graph-destroy")) {
            int n = atoi(arg1);
            printf("graph-destroy %d rc=%d\n", n, CU(cuGraphDestroy, (CUgraph))(graphs[n].graph));
        } else if (!strcmp(step, "free-graph-ptr")) {
            int n = atoi(arg1);
            printf("free-graph-ptr %d rc=%d\n", n, CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(graphs[n].dptr, NULL));
        } else if (!strcmp(step, "trim")) {
            CUdevice dev = 0;
            CU(cuCtxGetDevice, (CUdevice *))(&dev);
            printf("trim rc=%d\n", CU(cuDeviceGraphMemTrim, (CUdevice))(dev));
        } else if (!strcmp(step, "graph-attr")) {
            CUdevice dev = 0;
            unsigned long long used = 0, reserved = 0;
            CU(cuCtxGetDevice, (CUdevice *))(&dev);
            CUresult r1 = CU(cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
                                                                                  &used);
            CUresult r2 = CU(cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))(
                dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
            printf("graph-attr rc=%d,%d used=%llu reserved=%llu\n", r1, r2, used >> 20, reserved >> 20);
        } else if (!strcmp(step, "ctx")) {
            CUcontext c = NULL, prev = NULL;
            CU(cuCtxGetCurrent, (CUcontext *))(&prev);
            CUresult rc = CU(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice))(&c, 0, 0);
            size_t f = 0, t = 0;
            CU(cuMemGetInfo_v2, (size_t *, size_t *))(&f, &t);
            CUresult rd = CU(cuCtxDestroy_v2, (CUcontext))(c);
            CU(cuCtxSetCurrent, (CUcontext))(prev);
            printf("ctx rc=%d free_inside=%zu destroy=%d\n", rc, f >> 20, rd);
        } else if (!strcmp(step, "hold")) {
            printf("holding\n");
            sleep((unsigned)atoi(arg1));
        } else if (!strcmp(step, "early")) {
            /* a runtime resolves cuLaunchKernel before cuInit, then launches */
            void *f = NULL;
            CU(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *))("cuLaunchKernel", &f, 13000, 0,
                                                                                     NULL);
            early_launch = f;
            printf("early resolved=%d\n", f != NULL);
        } else if (!strcmp(step, "launch-early")) {
            int n = atoi(arg1), bad = 0;
            for (int k = 0; k < n; k++)
                bad += ((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     CUstream, void **, void **))early_launch)(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL,
                                                                              NULL) != CUDA_SUCCESS;
            printf("launch-early n=%d failures=%d\n", n, bad);
        } else if (!strcmp(step, "launch")) {
            int n = atoi(arg1), bad = 0;
            void *f = NULL;
            CU(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, int *))("cuLaunchKernel", &f, 13000, 0,
                                                                                     NULL);
            for (int k = 0; k < n; k++) {
                CUresult r1 = CU(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                  unsigned, unsigned, CUstream, void **, void **))(
                    NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
                CUresult r2 = ((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                            unsigned, CUstream, void **, void **))f)(NULL, 1, 1, 1, 1, 1, 1, 0, NULL,
                                                                                     NULL, NULL);
                bad += r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS;
            }
            printf("launch n=%d failures=%d\n", 2 * n, bad);
        } else if (!strcmp(step, "fork-orphan")) {
            /* a child that keeps the driver's file descriptors for SEC s; the parent goes on (and
             * exits after its last step), so its memory is held by a process it no longer is */
            pid_t child = fork();
            if (child == 0) {
                sleep((unsigned)atoi(arg1));
                _exit(0);
            }
            printf("fork-orphan child=%d\n", (int)child);
        } else if (!strcmp(step, "linger")) {
            /* at exit, after libvgpu's destructor, stay alive SEC s (tests/linger.c) */
            setenv("VGPU_TEST_LINGER", arg1, 1);
            printf("linger %s loaded=%d\n", arg1, dlopen(getenv("VGPU_TEST_LINGER_LIB"), RTLD_NOW) != NULL);
        } else if (!strcmp(step, "truth")) {
            printf("truth used=%llu\n", truth_mib());
        } else if (!strcmp(step, "threshold")) {
            CUmemoryPool pool = NULL;
            unsigned long long v = !strcmp(arg1, "max") ? ~0ULL : (unsigned long long)atol(arg1) << 20;
            CUresult rc = CU(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
            if (rc == CUDA_SUCCESS)
                rc = CU(cuMemPoolSetAttribute, (CUmemoryPool, int, void *))(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
            printf("threshold %s rc=%d\n", arg1, rc);
        } else if (!strcmp(step, "sync")) {
            printf("sync rc=%d\n", CU(cuCtxSynchronize, (void))());
        } else if (!strcmp(step, "free-sync") || !strcmp(step, "free-async")) {
            /* allocation N freed by cuMemFree_v2, or by cuMemFreeAsync on the NULL stream, whatever made it */
            int n = atoi(arg1);
            CUresult rc = -1;
            if (n < nallocs && allocs[n].live)
                rc = !strcmp(step, "free-sync") ? CU(cuMemFree_v2, (CUdeviceptr))(allocs[n].key)
                                                : CU(cuMemFreeAsync, (CUdeviceptr, CUstream))(allocs[n].key, NULL);
            if (rc == CUDA_SUCCESS)
                allocs[n].live = 0;
            printf("%s %d rc=%d\n", step, n, rc);
        } else if (!strcmp(step, "ctx-none")) {
            printf("ctx-none rc=%d\n", CU(cuCtxSetCurrent, (CUcontext))(NULL));
        } else if (!strcmp(step, "threads")) {
            pair_threads(atoi(arg1), arg2 ? atoi(arg2) : 10);
        } else if (!strcmp(step, "ssync")) {
            printf("ssync rc=%d\n", CU(cuStreamSynchronize, (CUstream))(NULL));
        } else if (!strcmp(step, "pool-trim")) {
            CUmemoryPool pool = NULL;
            CUresult rc = CU(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
            if (rc == CUDA_SUCCESS)
                rc = CU(cuMemPoolTrimTo, (CUmemoryPool, size_t))(pool, (size_t)atol(arg1) << 20);
            printf("pool-trim %s rc=%d\n", arg1, rc);
        } else if (!strcmp(step, "pool-create")) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = 0;
            printf("pool-create rc=%d\n", CU(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))(&made_pool, &props));
        } else if (!strcmp(step, "pool-set")) {
            printf("pool-set rc=%d\n", CU(cuDeviceSetMemPool, (CUdevice, CUmemoryPool))(0, made_pool));
        } else if (!strcmp(step, "pool-set13")) {
            CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
            printf("pool-set13 rc=%d\n", CU(cuMemSetMemPool, (CUmemLocation *, int, CUmemoryPool))(
                                             &loc, CU_MEM_ALLOCATION_TYPE_PINNED, made_pool));
        } else if (!strcmp(step, "pool-default")) {
            CUmemoryPool pool = NULL;
            CU(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))(&pool, 0);
            printf("pool-default rc=%d\n", CU(cuDeviceSetMemPool, (CUdevice, CUmemoryPool))(0, pool));
        } else if (!strcmp(step, "pool-destroy")) {
            printf("pool-destroy rc=%d\n", CU(cuMemPoolDestroy, (CUmemoryPool))(made_pool));
        } else if (!strcmp(step, "pool-share")) {
            /* allocation N of made_pool exported and imported through a shareable pool */
            int n = atoi(arg1), fd = -1;
            CUmemoryPool imported = NULL;
            char data[64];
            CUdeviceptr p = 0;
            CUresult r1 = CU(cuMemPoolExportToShareableHandle, (void *, CUmemoryPool, int, unsigned long long))(
                &fd, made_pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            CUresult r2 = r1 ? r1 : CU(cuMemPoolImportFromShareableHandle, (CUmemoryPool *, void *, int, unsigned long long))(
                &imported, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            CUresult r3 = CU(cuMemPoolExportPointer, (void *, CUdeviceptr))(data, n < nallocs ? allocs[n].key : 0);
            CUresult r4 = r3 ? r3 : CU(cuMemPoolImportPointer, (CUdeviceptr *, CUmemoryPool, void *))(&p, imported, data);
            printf("pool-share export=%d import=%d export-ptr=%d import-ptr=%d\n", r1, r2, r3, r4);
        } else if (!strcmp(step, "vmm")) {
            CUresult rc = vmm_step((size_t)atol(arg1), arg2 ? arg2 : "keep");
            printf("vmm %s %s rc=%d\n", arg1, arg2 ? arg2 : "keep", rc);
        } else if (!strcmp(step, "unmap")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            printf("unmap %s rc=%d\n", arg1, CU(cuMemUnmap, (CUdeviceptr, size_t))(v->va, v->size));
        } else if (!strcmp(step, "release")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            printf("release %s rc=%d\n", arg1, CU(cuMemRelease, (CUmemGenericAllocationHandle))(v->handle));
        } else if (!strcmp(step, "retain")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            CUresult rc = CU(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *))(
                &v->retained, (void *)(uintptr_t)v->va);
            CUresult rr = CU(cuMemRelease, (CUmemGenericAllocationHandle))(v->handle);
            printf("retain %s rc=%d same=%d released-original=%d\n", arg1, rc, v->retained == v->handle, rr);
        } else if (!strcmp(step, "export")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            CUresult rc = CU(cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, int, unsigned long long))(
                &v->fd, v->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            printf("export %s rc=%d\n", arg1, rc);
        } else if (!strcmp(step, "import")) {
            /* the exported handle imported, mapped, unmapped and released */
            struct vmm *v = &vmms[atoi(arg1) % 64];
            CUdeviceptr va = 0;
            CUresult r1 = CU(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, int))(
                &v->imported, (void *)(intptr_t)v->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            CUresult r2 = r1 ? r1 : CU(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))(
                &va, v->size, 0, 0, 0);
            CUresult r3 = r2 ? r2 : CU(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                                unsigned long long))(va, v->size, 0, v->imported, 0);
            printf("import %s rc=%d map=%d", arg1, r1, r3);
            printf(" truth=%llu", truth_mib());
            printf(" unmap=%d release=%d\n", CU(cuMemUnmap, (CUdeviceptr, size_t))(va, v->size),
                   CU(cuMemRelease, (CUmemGenericAllocationHandle))(v->imported));
        } else if (!strcmp(step, "mcast") || !strcmp(step, "mcast-addr")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            CUmulticastObjectProp prop = {1, v->size, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0};
            CUmemGenericAllocationHandle mc = 0;
            CUresult r1 = CU(cuMulticastCreate, (CUmemGenericAllocationHandle *, const CUmulticastObjectProp *))(&mc, &prop);
            CUresult r2 = r1 ? r1 : CU(cuMulticastAddDevice, (CUmemGenericAllocationHandle, CUdevice))(mc, 0);
            CUresult r3 = r2 ? r2
                          : !strcmp(step, "mcast")
                              ? CU(cuMulticastBindMem, (CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                                                        size_t, size_t, unsigned long long))(mc, 0, v->handle, 0, v->size, 0)
                              : CU(cuMulticastBindAddr, (CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                                                         unsigned long long))(mc, 0, v->va, v->size, 0);
            printf("%s %s create=%d bind=%d\n", step, arg1, r1, r3);
        } else if (!strcmp(step, "maparray")) {
            struct vmm *v = &vmms[atoi(arg1) % 64];
            CUarrayMapInfo info;
            memset(&info, 0, sizeof info);
            info.resource.array = (CUarray)(uintptr_t)0x5a000;
            info.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
            info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
            info.memHandle.memHandle = v->handle;
            info.deviceBitMask = 1;
            printf("maparray %s rc=%d\n", arg1, CU(cuMemMapArrayAsync, (CUarrayMapInfo *, unsigned, CUstream))(&info, 1, NULL));
        } else if (!strcmp(step, "ctxs")) {
            /* N more contexts (cuCtxCreate_v2), each holding 1 MiB; the first one to fail says why */
            int n = atoi(arg1), made = 0;
            CUcontext prev = NULL;
            CUresult rc = CUDA_SUCCESS;
            CU(cuCtxGetCurrent, (CUcontext *))(&prev);
            for (int k = 0; k < n && rc == CUDA_SUCCESS; k++) {
                CUcontext c = NULL;
                rc = CU(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice))(&c, 0, 0);
                if (rc == CUDA_SUCCESS) {
                    contexts[ncontexts++ % 64] = c;
                    made++;
                    CUdeviceptr p;
                    rc = CU(cuMemAlloc_v2, (CUdeviceptr *, size_t))(&p, 1 << 20);
                }
            }
            CU(cuCtxSetCurrent, (CUcontext))(prev);
            printf("ctxs %d made=%d rc=%d\n", n, made, rc);
        } else if (!strcmp(step, "ctx-destroy-all")) {
            int bad = 0;
            for (int k = 0; k < ncontexts && k < 64; k++)
                bad += CU(cuCtxDestroy_v2, (CUcontext))(contexts[k]) != CUDA_SUCCESS;
            printf("ctx-destroy-all n=%d failures=%d\n", ncontexts, bad);
            ncontexts = 0;
        } else if (!strcmp(step, "module")) {
            const char *how = arg2 ? arg2 : "data";
            const char *ptx = ptx_with_global((size_t)atol(arg1));
            CUmodule m = NULL;
            CUresult rc;
            if (!strcmp(how, "ex")) {
                rc = CU(cuModuleLoadDataEx, (CUmodule *, const void *, unsigned, int *, void **))(&m, ptx, 0, NULL, NULL);
            } else if (!strcmp(how, "fatbin")) {
                rc = CU(cuModuleLoadFatBinary, (CUmodule *, const void *))(&m, ptx);
            } else if (!strcmp(how, "file")) {
                char path[64];
                snprintf(path, sizeof path, "/tmp/vgpu-client-%d.ptx", (int)getpid());
                FILE *f = fopen(path, "w");
                fputs(ptx, f);
                fclose(f);
                rc = CU(cuModuleLoad, (CUmodule *, const char *))(&m, path);
                unlink(path);
            } else {
                rc = CU(cuModuleLoadData, (CUmodule *, const void *))(&m, ptx);
            }
            CUfunction func = NULL;
            CUresult rf = rc ? rc : CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(&func, m, "k");
            if (rc == CUDA_SUCCESS)
                modules[nmodules++ % 64] = m;
            printf("module %s %s rc=%d function=%d\n", arg1, how, rc, rf);
        } else if (!strcmp(step, "unload")) {
            printf("unload %s rc=%d\n", arg1, CU(cuModuleUnload, (CUmodule))(modules[atoi(arg1) % 64]));
        } else if (!strcmp(step, "library")) {
            const char *how = arg2 ? arg2 : "get";
            const char *ptx = ptx_with_global((size_t)atol(arg1));
            CUlibrary l = NULL;
            CUresult rc;
            if (!strcmp(how, "file")) {
                char path[64];
                snprintf(path, sizeof path, "/tmp/vgpu-client-%d.ptx", (int)getpid());
                FILE *f = fopen(path, "w");
                fputs(ptx, f);
                fclose(f);
                rc = CU(cuLibraryLoadFromFile, (CUlibrary *, const char *, int *, void **, unsigned, int *, void **,
                                                unsigned))(&l, path, NULL, NULL, 0, NULL, NULL, 0);
                unlink(path);
            } else {
                rc = CU(cuLibraryLoadData, (CUlibrary *, const void *, int *, void **, unsigned, int *, void **,
                                            unsigned))(&l, ptx, NULL, NULL, 0, NULL, NULL, 0);
            }
            CUkernel k = NULL;
            CUfunction func = NULL;
            CUmodule m = NULL;
            CUresult rk = rc ? rc : CU(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *))(&k, l, "k");
            CUresult ru = rk;
            if (!rk && !strcmp(how, "module"))
                ru = CU(cuLibraryGetModule, (CUmodule *, CUlibrary))(&m, l);
            else if (!rk && !strcmp(how, "lazy")) /* cudart's way: the kernel launched, loaded inside the launch */
                ru = CU(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                         CUstream, void **, void **))((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            else if (!rk)
                ru = CU(cuKernelGetFunction, (CUfunction *, CUkernel))(&func, k);
            if (rc == CUDA_SUCCESS)
                libraries[nlibraries++ % 64] = l;
            printf("library %s %s rc=%d kernel=%d use=%d\n", arg1, how, rc, rk, ru);
        } else if (!strcmp(step, "lib-unload")) {
            printf("lib-unload %s rc=%d\n", arg1, CU(cuLibraryUnload, (CUlibrary))(libraries[atoi(arg1) % 64]));
        } else if (!strcmp(step, "stack") || !strcmp(step, "heap")) {
            int limit = !strcmp(step, "stack") ? CU_LIMIT_STACK_SIZE : CU_LIMIT_MALLOC_HEAP_SIZE;
            size_t want = (size_t)atol(arg1) << (limit == CU_LIMIT_STACK_SIZE ? 10 : 20), now = 0;
            CUresult rc = CU(cuCtxSetLimit, (int, size_t))(limit, want);
            CU(cuCtxGetLimit, (size_t *, int))(&now, limit);
            printf("%s %s rc=%d now=%zu\n", step, arg1, rc, now >> (limit == CU_LIMIT_STACK_SIZE ? 10 : 20));
        } else if (!strcmp(step, "ipc-get")) {
            int n = atoi(arg1);
            CUipcMemHandle h;
            CUresult rc = CU(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))(&h, n < nallocs ? allocs[n].key : 0);
            FILE *f = rc == CUDA_SUCCESS ? fopen(arg2, "w") : NULL;
            if (f) {
                fwrite(&h, sizeof h, 1, f);
                fclose(f);
            }
            printf("ipc-get %d rc=%d\n", n, rc);
        } else if (!strcmp(step, "ipc-open")) {
            CUipcMemHandle h;
            memset(&h, 0, sizeof h);
            FILE *f = fopen(arg1, "r");
            size_t got = f ? fread(&h, sizeof h, 1, f) : 0;
            if (f)
                fclose(f);
            CUresult rc = CU(cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned))(&ipc_opened, h, 1);
            printf("ipc-open read=%zu rc=%d\n", got, rc);
        } else if (!strcmp(step, "ipc-close")) {
            printf("ipc-close rc=%d\n", CU(cuIpcCloseMemHandle, (CUdeviceptr))(ipc_opened));
        } else if (!strcmp(step, "hostalloc")) {
            size_t bytes = (size_t)atol(arg1) << 20;
            void *p1 = NULL, *p2 = NULL;
            CUresult r1 = CU(cuMemHostAlloc, (void **, size_t, unsigned))(&p1, bytes, 0);
            CUresult r2 = CU(cuMemAllocHost_v2, (void **, size_t))(&p2, bytes);
            printf("hostalloc %s rc=%d,%d\n", arg1, r1, r2);
        } else if (!strcmp(step, "abs-alloc")) {
            /* the real driver opened by its absolute path, its cuMemAlloc_v2 by dlsym (issue 24, case 5) */
            void *real = dlopen(getenv("FAKE_DRIVER"), RTLD_NOW);
            CUdeviceptr p = 0;
            CUresult rc = ((CUresult(*)(CUdeviceptr *, size_t))dlsym(real, "cuMemAlloc_v2"))(&p, (size_t)atol(arg1) << 20);
            if (rc == CUDA_SUCCESS && nallocs < 4096) {
                snprintf(allocs[nallocs].api, sizeof allocs[nallocs].api, "v2");
                allocs[nallocs].key = p;
                allocs[nallocs++].live = 1;
            }
            printf("abs-alloc %s rc=%d\n", arg1, rc);
        } else if (!strcmp(step, "rawfree")) {
            /* memory the interposer never saw: allocated straight from the real driver */
            void *real = dlopen(getenv("FAKE_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
            if (!real)
                real = dlopen(getenv("FAKE_DRIVER"), RTLD_NOW);
            CUdeviceptr p = 0;
            CUresult ra = ((CUresult(*)(CUdeviceptr *, size_t))dlsym(real, "cuMemAlloc_v2"))(&p, 1 << 20);
            CUresult rf = CU(cuMemFree_v2, (CUdeviceptr))(p);
            CUresult rb = CU(cuMemFree_v2, (CUdeviceptr))(0xdead000);
            printf("rawfree alloc=%d free=%d bogus=%d\n", ra, rf, rb);
        } else if (!strcmp(step, "forward")) {
            char name[64] = "";
            int v = 0;
            CUresult r1 = CU(cuDeviceGetName, (char *, int, CUdevice))(name, sizeof name, 0);
            CUresult r2 = CU(cuDriverGetVersion, (int *))(&v);
            printf("forward name=%s rc=%d version=%d rc=%d\n", name, r1, v, r2);
        } else if (!strcmp(step, "missing")) {
            /* exported by the shim (CUDA 13 list) but absent from this driver */
            CUresult r = CU(cuCtxSynchronize_v2, (CUcontext))(NULL);
            printf("missing rc=%d\n", r);
        } else if (!strcmp(step, "pitch")) {
            CUdeviceptr p;
            size_t pitch = 0;
            CUresult rc = CU(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned))(
                &p, &pitch, (size_t)atol(arg1), (size_t)atol(arg2), 4);
            if (rc == CUDA_SUCCESS) {
                snprintf(allocs[nallocs].api, sizeof allocs[nallocs].api, "v2");
                allocs[nallocs].key = p;
                allocs[nallocs++].live = 1;
            }
            printf("pitch rc=%d pitch=%zu\n", rc, pitch);
        } else if (!strcmp(step, "hammer")) {
            int iters = atoi(arg1), maxmib = atoi(arg2), ok = 0, oom = 0, other = 0;
            unsigned seed = (unsigned)getpid();
            CUdeviceptr held[8] = {0};
            for (int k = 0; k < iters; k++) {
                int s = rand_r(&seed) % 8;
                if (held[s]) {
                    if (CU(cuMemFree_v2, (CUdeviceptr))(held[s]) != CUDA_SUCCESS)
                        other++;
                    held[s] = 0;
                } else {
                    size_t mib = 1 + (size_t)(rand_r(&seed) % maxmib);
                    CUresult rc = CU(cuMemAlloc_v2, (CUdeviceptr *, size_t))(&held[s], mib << 20);
                    if (rc == CUDA_SUCCESS)
                        ok++;
                    else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                        oom++, held[s] = 0;
                    else
                        other++, held[s] = 0;
                }
            }
            for (int s = 0; s < 8; s++)
                if (held[s])
                    CU(cuMemFree_v2, (CUdeviceptr))(held[s]);
            printf("hammer ok=%d oom=%d other=%d\n", ok, oom, other);
        } else {
            printf("unknown step %s\n", step);
            return 3;
        }
    }
    return 0;
}
