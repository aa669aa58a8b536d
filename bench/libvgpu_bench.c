/* Micro-benchmarks for bench/libvgpu_bench.py, through libcuda.so.1 as the loader finds it
 * (native driver, or the interposer with LD_LIBRARY_PATH=/opt/vgpu). Built with gcc only.
 *   libvgpu_bench alloc N        ns per cuMemAlloc_v2(1 MiB) + cuMemFree_v2 (median of 5 batches of N)
 *   libvgpu_bench launch N       ns per launch of an empty kernel, JIT from PTX (median of 10 batches of N)
 *   libvgpu_bench first-alloc    CLOCK_REALTIME ns at which the first allocation succeeded
 *   libvgpu_bench ab-alloc|ab-launch|ab-launch-lib|ab-async|ab-module SHIM REAL N PAIRS
 *       the same process calls the driver directly (REAL, absolute path) and through the
 *       interposer (SHIM), in alternating batches of N: prints "native_ns interposer_ns", the
 *       medians over PAIRS batches each. The shim must be set to load REAL (VGPU_REAL_LIBCUDA).
 *       ab-launch-lib: the empty kernel of a library, launched by its CUkernel (as cudart 12+ does);
 *       ab-async: cuMemAllocAsync + cuMemFreeAsync of 1 MiB (then one synchronize per batch);
 *       ab-module: cuModuleLoadData + cuModuleUnload of an empty PTX module (JIT included).
 *   libvgpu_bench count-alloc|count-async LIB N
 *       one warm batch of N through LIB (absolute path), then one more inside counted_batch(), for
 *       instruction counts under valgrind --tool=callgrind --toggle-collect=counted_batch
 *       (bench/libvgpu_instructions.py). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

static void *lib;
static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "missing %s\n", name);
        exit(1);
    }
    return p;
}
#define CU(name, args) ((CUresult(*) args)sym(#name))
#define CHECK(call)                                                                                                   \
    do {                                                                                                              \
        CUresult rc_ = (call);                                                                                        \
        if (rc_) {                                                                                                    \
            fprintf(stderr, "%s failed: %d\n", #call, rc_);                                                           \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

static double now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry empty()\n{\n\tret;\n}\n";

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static double batch_launch(void *h, CUfunction fn, long n);

static double batch_alloc(void *h, long n)
{
    alloc_fn a = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    free_fn f = (free_fn)dlsym(h, "cuMemFree_v2");
    CUdeviceptr p;
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
        CHECK(a(&p, 1 << 20));
        CHECK(f(p));
    }
    return (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
}

static double batch_async(void *h, long n)
{
    CUresult (*a)(CUdeviceptr *, size_t, CUstream) = (CUresult(*)(CUdeviceptr *, size_t, CUstream))dlsym(h, "cuMemAllocAsync");
    CUresult (*f)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))dlsym(h, "cuMemFreeAsync");
    CUresult (*sync)(void) = (CUresult(*)(void))dlsym(h, "cuCtxSynchronize");
    CUdeviceptr p;
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
        CHECK(a(&p, 1 << 20, NULL));
        CHECK(f(p, NULL));
    }
    CHECK(sync());
    return (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
}

static double batch_module(void *h, long n)
{
    CUresult (*load)(CUmodule *, const void *) = (CUresult(*)(CUmodule *, const void *))dlsym(h, "cuModuleLoadData");
    CUresult (*unload)(CUmodule) = (CUresult(*)(CUmodule))dlsym(h, "cuModuleUnload");
    CUmodule m;
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
        CHECK(load(&m, ptx));
        CHECK(unload(m));
    }
    return (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
}

static double batch_of(const char *mode, void *h, CUfunction fn, long n)
{
    if (!strncmp(mode, "ab-launch", 9))
        return batch_launch(h, fn, n);
    if (!strcmp(mode, "ab-async"))
        return batch_async(h, n);
    if (!strcmp(mode, "ab-module"))
        return batch_module(h, n);
    return batch_alloc(h, n);
}

static double batch_launch(void *h, CUfunction fn, long n)
{
    launch_fn l = (launch_fn)dlsym(h, "cuLaunchKernel");
    CUresult (*sync)(void) = (CUresult(*)(void))dlsym(h, "cuCtxSynchronize");
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++)
        CHECK(l(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(sync());
    return (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
}

static int ab(const char *mode, const char *shim_path, const char *real_path, long n, int pairs)
{
    void *shim = dlopen(shim_path, RTLD_NOW | RTLD_LOCAL);
    void *real = dlopen(real_path, RTLD_NOW | RTLD_LOCAL);
    if (!shim || !real || pairs < 1 || pairs > 200) {
        fprintf(stderr, "ab: %s\n", dlerror());
        return 1;
    }
    lib = shim; /* initialise through the interposer, as an application would */
    CUcontext ctx;
    CHECK(CU(cuInit, (unsigned))(0));
    CHECK(CU(cuDevicePrimaryCtxRetain, (CUcontext *, int))(&ctx, 0));
    CHECK(CU(cuCtxSetCurrent, (CUcontext))(ctx));
    CUfunction fn = NULL;
    if (!strcmp(mode, "ab-launch")) {
        CUmodule mod;
        CHECK(CU(cuModuleLoadData, (CUmodule *, const void *))(&mod, ptx));
        CHECK(CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(&fn, mod, "empty"));
    } else if (!strcmp(mode, "ab-launch-lib")) {
        void *library;
        CHECK(CU(cuLibraryLoadData, (void **, const void *, void *, void **, unsigned, void *, void **, unsigned))(
            &library, ptx, NULL, NULL, 0, NULL, NULL, 0));
        CHECK(CU(cuLibraryGetKernel, (void **, void *, const char *))((void **)&fn, library, "empty"));
    }
    double nat[200], vg[200];
    for (int w = 0; w < 2; w++) { /* warm both paths */
        batch_of(mode, real, fn, n);
        batch_of(mode, shim, fn, n);
    }
    for (int i = 0; i < pairs; i++) {
        if (i % 2 == 0) {
            nat[i] = batch_of(mode, real, fn, n);
            vg[i] = batch_of(mode, shim, fn, n);
        } else {
            vg[i] = batch_of(mode, shim, fn, n);
            nat[i] = batch_of(mode, real, fn, n);
        }
    }
    printf("%.2f %.2f\n", median(nat, pairs), median(vg, pairs));
    return 0;
}

/* The batch callgrind counts (its name is bench/libvgpu_instructions.py's --toggle-collect). */
__attribute__((noinline)) double counted_batch(const char *mode, void *h, long n)
{
    double ns = batch_of(mode, h, NULL, n);
    __asm__ volatile("" ::: "memory"); /* not a tail call: callgrind must see this function return */
    return ns;
}

static int count(const char *mode, const char *path, long n)
{
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib || n < 1) {
        fprintf(stderr, "count: %s\n", lib ? "N must be at least 1" : dlerror());
        return 1;
    }
    CUcontext ctx;
    CHECK(CU(cuInit, (unsigned))(0));
    CHECK(CU(cuDevicePrimaryCtxRetain, (CUcontext *, int))(&ctx, 0));
    CHECK(CU(cuCtxSetCurrent, (CUcontext))(ctx));
    const char *batch = !strcmp(mode, "count-async") ? "ab-async" : "ab-alloc";
    batch_of(batch, lib, NULL, n); /* first calls (lookups, tables grown) out of the count */
    counted_batch(batch, lib, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (!strncmp(argv[1], "count-", 6))
        return argc < 4 ? 2 : count(argv[1], argv[2], atol(argv[3]));
    if (!strncmp(argv[1], "ab-", 3))
        return argc < 6 ? 2 : ab(argv[1], argv[2], argv[3], atol(argv[4]), atoi(argv[5]));
    long n = argc > 2 ? atol(argv[2]) : 1000;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    CUcontext ctx;
    CHECK(CU(cuInit, (unsigned))(0));
    CHECK(CU(cuDevicePrimaryCtxRetain, (CUcontext *, int))(&ctx, 0));
    CHECK(CU(cuCtxSetCurrent, (CUcontext))(ctx));
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))sym("cuMemAlloc_v2");
    CUresult (*mfree)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))sym("cuMemFree_v2");
    CUdeviceptr p;
    if (!strcmp(argv[1], "first-alloc")) {
        CHECK(alloc(&p, 1 << 20));
        printf("%.0f\n", now_ns(CLOCK_REALTIME));
        return 0;
    }
    if (!strcmp(argv[1], "alloc")) {
        for (int i = 0; i < 200; i++) {
            CHECK(alloc(&p, 1 << 20));
            CHECK(mfree(p));
        }
        double batch[5];
        for (int b = 0; b < 5; b++) {
            double t0 = now_ns(CLOCK_MONOTONIC);
            for (long i = 0; i < n; i++) {
                CHECK(alloc(&p, 1 << 20));
                CHECK(mfree(p));
            }
            batch[b] = (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
        }
        printf("%.1f\n", median(batch, 5));
        return 0;
    }
    if (!strcmp(argv[1], "launch")) {
        CUmodule mod;
        CUfunction f;
        CHECK(CU(cuModuleLoadData, (CUmodule *, const void *))(&mod, ptx));
        CHECK(CU(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))(&f, mod, "empty"));
        CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **) =
            (CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                         void **, void **))sym("cuLaunchKernel");
        CUresult (*sync)(void) = (CUresult(*)(void))sym("cuCtxSynchronize");
        for (int i = 0; i < 1000; i++)
            CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CHECK(sync());
        /* each batch: n launches then one synchronise */
        double batch[10];
        for (int b = 0; b < 10; b++) {
            double t0 = now_ns(CLOCK_MONOTONIC);
            for (long i = 0; i < n; i++)
                CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
            CHECK(sync());
            batch[b] = (now_ns(CLOCK_MONOTONIC) - t0) / (double)n;
        }
        printf("%.1f\n", median(batch, 10));
        return 0;
    }
    return 2;
}
