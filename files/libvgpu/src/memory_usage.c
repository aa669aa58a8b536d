/* vgpu-memory-usage: allocate N MiB of GPU memory through the driver API (libcuda.so.1 as the
 * loader finds it, so the interposer when LD_LIBRARY_PATH=/opt/vgpu), touch it, hold it, report.
 *   vgpu-memory-usage MIB [SECONDS [--local KIB | --heap MIB | --fork-orphan]]
 * then, before holding: --local launches a kernel whose threads use KIB KiB of local memory each
 * (the driver reserves it for every thread the GPU can hold: 64 KiB is 16.2 GiB on an H200);
 * --heap sets the device heap to MIB and launches a kernel that calls malloc (the driver takes the
 * heap then); --fork-orphan forks a child that holds the driver's file descriptors, and so the
 * memory, for SECONDS while this process exits at once.
 * Exit status: 0 held, 2 out of memory (at the allocation, the launch or the heap), 1 any other
 * failure. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"
#include "ptx.h"
#include "vgpu.h"

typedef CUresult (*init_t)(unsigned);
typedef CUresult (*dev_get_t)(CUdevice *, int);
typedef CUresult (*retain_t)(CUcontext *, CUdevice);
typedef CUresult (*set_t)(CUcontext);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*memset_t)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*sync_t)(void);
typedef CUresult (*info_t)(size_t *, size_t *);
typedef CUresult (*errname_t)(CUresult, const char **);

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "vgpu-memory-usage: %s missing from libcuda.so.1\n", name);
        exit(1);
    }
    return p;
}

static const char *name_of(void *h, CUresult rc)
{
    const char *n = "?";
    ((errname_t)sym(h, "cuGetErrorName"))(rc, &n);
    return n;
}

/* Launch a kernel with local_kib KiB of local memory a thread (calling malloc when heap) once,
 * and wait for it: the launch's result. */
static CUresult launch(void *h, size_t local_kib, int heap)
{
    CUmodule m = NULL;
    CUfunction f = NULL;
    CUdeviceptr out = 0;
    unsigned idx = 0;
    void *params[] = {&out, &idx};
    CUresult rc = ((CUresult(*)(CUmodule *, const void *))sym(h, "cuModuleLoadData"))(&m, ptx_with_local(local_kib << 10, heap));
    if (rc == CUDA_SUCCESS)
        rc = ((CUresult(*)(CUfunction *, CUmodule, const char *))sym(h, "cuModuleGetFunction"))(&f, m, "lk");
    if (rc == CUDA_SUCCESS)
        rc = ((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **))sym(h, "cuLaunchKernel"))(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (rc == CUDA_SUCCESS)
        rc = ((sync_t)sym(h, "cuCtxSynchronize"))();
    return rc;
}

/* The option after MIB SECONDS, before holding: 0 done, else the exit status. */
static int option(void *h, const char *opt, const char *arg, int hold)
{
    CUresult rc = CUDA_SUCCESS;
    if (!strcmp(opt, "--local") && arg && vgpu_decimal(arg, NULL) > 0) {
        rc = launch(h, (size_t)vgpu_decimal(arg, NULL), 0);
        printf("launching a kernel of %s KiB local memory a thread: %s (%d)\n", arg, name_of(h, rc), rc);
    } else if (!strcmp(opt, "--heap") && arg && vgpu_decimal(arg, NULL) > 0) {
        rc = ((CUresult(*)(int, size_t))sym(h, "cuCtxSetLimit"))(CU_LIMIT_MALLOC_HEAP_SIZE,
                                                                 (size_t)vgpu_decimal(arg, NULL) << 20);
        printf("setting the device heap to %s MiB: %s (%d)\n", arg, name_of(h, rc), rc);
        if (rc == CUDA_SUCCESS) {
            rc = launch(h, 1, 1);
            printf("launching a kernel that calls malloc: %s (%d)\n", name_of(h, rc), rc);
        }
    } else if (!strcmp(opt, "--fork-orphan")) {
        pid_t child = fork();
        if (child == 0) {
            sleep((unsigned)hold);
            _exit(0);
        }
        printf("forked %d, which holds the memory %d s; exiting\n", (int)child, hold);
        fflush(stdout);
        _exit(child > 0 ? 0 : 1);
    } else {
        fprintf(stderr, "vgpu-memory-usage: unknown option %s %s (expected --local KIB, --heap MIB or --fork-orphan)\n",
                opt, arg ? arg : "");
        return 1;
    }
    fflush(stdout);
    return rc == CUDA_SUCCESS ? 0 : rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || vgpu_decimal(argv[1], NULL) <= 0) {
        fprintf(stderr, "usage: vgpu-memory-usage MIB [SECONDS [--local KIB | --heap MIB | --fork-orphan]]\n");
        return 1;
    }
    size_t mib = (size_t)vgpu_decimal(argv[1], NULL);
    int hold = argc > 2 ? (int)vgpu_decimal(argv[2], NULL) : 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "vgpu-memory-usage: %s\n", dlerror());
        return 1;
    }
    CUcontext ctx;
    CUdevice dev;
    CUresult rc = ((init_t)sym(h, "cuInit"))(0);
    if (rc == CUDA_SUCCESS)
        rc = ((dev_get_t)sym(h, "cuDeviceGet"))(&dev, 0);
    if (rc == CUDA_SUCCESS)
        rc = ((retain_t)sym(h, "cuDevicePrimaryCtxRetain"))(&ctx, dev);
    if (rc == CUDA_SUCCESS)
        rc = ((set_t)sym(h, "cuCtxSetCurrent"))(ctx);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "vgpu-memory-usage: CUDA initialisation failed: %s (%d)\n", name_of(h, rc), rc);
        return 1;
    }
    CUdeviceptr p;
    rc = ((alloc_t)sym(h, "cuMemAlloc_v2"))(&p, mib << 20);
    if (rc != CUDA_SUCCESS) {
        printf("allocating %zu MiB failed: %s (%d)\n", mib, name_of(h, rc), rc);
        return rc == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
    }
    rc = ((memset_t)sym(h, "cuMemsetD8_v2"))(p, 0x5a, mib << 20);
    if (rc == CUDA_SUCCESS)
        rc = ((sync_t)sym(h, "cuCtxSynchronize"))();
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "vgpu-memory-usage: touching the memory failed (%d)\n", rc);
        return 1;
    }
    size_t free_b = 0, total_b = 0;
    ((info_t)sym(h, "cuMemGetInfo_v2"))(&free_b, &total_b);
    printf("allocated %zu MiB on device 0; cuMemGetInfo: free %zu MiB, total %zu MiB; holding %d s\n", mib,
           free_b >> 20, total_b >> 20, hold);
    fflush(stdout);
    int status = argc > 3 ? option(h, argv[3], argc > 4 ? argv[4] : NULL, hold) : 0;
    if (status)
        return status;
    if (hold > 0)
        sleep((unsigned)hold);
    ((free_t)sym(h, "cuMemFree_v2"))(p);
    printf("freed\n");
    return 0;
}
