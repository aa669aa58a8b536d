/* vgpu-memory-usage: allocate N MiB of GPU memory through the driver API (libcuda.so.1 as the
 * loader finds it, so the interposer when LD_LIBRARY_PATH=/opt/vgpu), touch it, hold it, report.
 *   vgpu-memory-usage MIB [SECONDS]
 * Exit status: 0 held, 2 out of memory, 1 any other failure. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "abi.h"
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

int main(int argc, char **argv)
{
    if (argc < 2 || vgpu_decimal(argv[1], NULL) <= 0) {
        fprintf(stderr, "usage: vgpu-memory-usage MIB [SECONDS]\n");
        return 1;
    }
    size_t mib = (size_t)vgpu_decimal(argv[1], NULL);
    int hold = argc > 2 ? (int)vgpu_decimal(argv[2], NULL) : 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "vgpu-memory-usage: %s\n", dlerror());
        return 1;
    }
    errname_t errname = (errname_t)sym(h, "cuGetErrorName");
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
        const char *n = "?";
        errname(rc, &n);
        fprintf(stderr, "vgpu-memory-usage: CUDA initialisation failed: %s (%d)\n", n, rc);
        return 1;
    }
    CUdeviceptr p;
    rc = ((alloc_t)sym(h, "cuMemAlloc_v2"))(&p, mib << 20);
    if (rc != CUDA_SUCCESS) {
        const char *n = "?";
        errname(rc, &n);
        printf("allocating %zu MiB failed: %s (%d)\n", mib, n, rc);
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
    if (hold > 0)
        sleep((unsigned)hold);
    ((free_t)sym(h, "cuMemFree_v2"))(p);
    printf("freed\n");
    return 0;
}
