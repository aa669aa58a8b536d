/* A fake CUDA driver for the CI tests (there is no GPU there): host memory behind the
 * driver-shaped API that libvgpu hooks. One device (ordinal 0) of FAKE_TOTAL_MIB (default 8192)
 * MiB; it refuses allocations past that with CUDA_ERROR_OUT_OF_MEMORY, like a full GPU.
 * FAKE_LEDGER=<file> keeps, across all processes, the device bytes currently allocated and their
 * peak (two u64 updated atomically), so a test can check the quota held for real. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "abi.h"

#define EXPORT __attribute__((visibility("default")))

static int initialised;
static CUcontext current;
static int primary_refs;
static uint64_t total_bytes;
static uint64_t used_bytes; /* this process, device memory */
static uint64_t *ledger;    /* [0] current, [1] peak, across processes */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct block {
    uint64_t key, bytes;
    void *mem;
    int device; /* counts as device memory */
};
static struct block blocks[65536];
static uint64_t next_handle = 0x1000;

static void setup(void)
{
    const char *t = getenv("FAKE_TOTAL_MIB");
    total_bytes = (uint64_t)(t ? atol(t) : 8192) << 20;
    const char *l = getenv("FAKE_LEDGER");
    if (l && *l) {
        int fd = open(l, O_RDWR | O_CREAT, 0666);
        if (fd >= 0 && ftruncate(fd, 4096) == 0) {
            void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED)
                ledger = m;
        }
        if (fd >= 0)
            close(fd);
    }
}

static void ledger_add(int64_t delta)
{
    if (!ledger)
        return;
    uint64_t now = __atomic_add_fetch(&ledger[0], (uint64_t)delta, __ATOMIC_SEQ_CST);
    uint64_t peak = __atomic_load_n(&ledger[1], __ATOMIC_SEQ_CST);
    while (delta > 0 && now > peak && !__atomic_compare_exchange_n(&ledger[1], &peak, now, 0, __ATOMIC_SEQ_CST,
                                                                  __ATOMIC_SEQ_CST))
        ;
}

/* Allocate host memory standing for device memory; key 0 = use the address as the key. */
static CUresult fake_alloc(uint64_t bytes, int device, uint64_t *key_out, void **mem_out)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (device && !current)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    if (device && used_bytes + bytes > total_bytes) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t i;
    for (i = 0; i < sizeof blocks / sizeof blocks[0] && blocks[i].mem; i++)
        ;
    if (i == sizeof blocks / sizeof blocks[0]) {
        munmap(m, bytes);
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t key = key_out && *key_out == 1 ? next_handle++ : (uint64_t)(uintptr_t)m;
    blocks[i] = (struct block){key, bytes, m, device};
    if (device) {
        used_bytes += bytes;
        ledger_add((int64_t)bytes);
    }
    pthread_mutex_unlock(&lock);
    if (key_out)
        *key_out = key;
    if (mem_out)
        *mem_out = m;
    return CUDA_SUCCESS;
}

static CUresult fake_free(uint64_t key)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        if (blocks[i].mem && blocks[i].key == key) {
            munmap(blocks[i].mem, blocks[i].bytes);
            if (blocks[i].device) {
                used_bytes -= blocks[i].bytes;
                ledger_add(-(int64_t)blocks[i].bytes);
            }
            memset(&blocks[i], 0, sizeof blocks[i]);
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuInit(unsigned flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialised)
        setup();
    initialised = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = e == 0 ? "CUDA_SUCCESS" : e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : e == 3 ? "CUDA_ERROR_NOT_INITIALIZED"
                                                                                  : "CUDA_ERROR_OTHER";
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    *n = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d || ordinal != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (!name || len < 16 || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    strcpy(name, "Fake GPU");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    if (!u || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++)
        u->bytes[i] = (char)(0x10 + i);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    return cuDeviceGetUuid(u, d);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = total_bytes;
    return CUDA_SUCCESS;
}

static struct CUctx_st {
    int dummy;
} primary_ctx, extra_ctx[64];

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    primary_refs++;
    *c = &primary_ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    if (d != 0 || primary_refs == 0)
        return CUDA_ERROR_INVALID_VALUE;
    primary_refs--;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    if (d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    primary_refs = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d)
{
    (void)flags;
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 64; i++) {
        if (!extra_ctx[i].dummy) {
            extra_ctx[i].dummy = 1;
            *c = &extra_ctx[i];
            current = *c;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c)
{
    if (!c || c == &primary_ctx || !c->dummy)
        return CUDA_ERROR_INVALID_VALUE;
    c->dummy = 0;
    if (current == c)
        current = NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    CUresult rc = fake_alloc(bytes, 1, &key, NULL);
    if (rc == CUDA_SUCCESS)
        *p = key;
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    return p ? fake_free(p) : CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cuMemAlloc_v2(p, bytes);
}

/* The pitch is the width rounded up to 1 KiB, like a real GPU's texture alignment. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    if (!p || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (width + 1023) & ~(size_t)1023;
    CUresult rc = cuMemAlloc_v2(p, pt * height);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s)
{
    (void)s;
    return cuMemAlloc_v2(p, bytes);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(p, bytes, s);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s)
{
    (void)s;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return cuMemAlloc_v2(p, bytes);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(p, bytes, pool, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    (void)s;
    return cuMemFree_v2(p);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return cuMemFreeAsync(p, s);
}

static struct CUmemPoolHandle_st {
    int dummy;
} default_pool;

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    if (!pool || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *pool = &default_pool;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    if (!h || !prop || !bytes || flags)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 1; /* ask for a handle, not an address */
    CUresult rc = fake_alloc(bytes, prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE, &key, NULL);
    if (rc == CUDA_SUCCESS)
        *h = key;
    return rc;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    return fake_free(h);
}

static uint64_t fmt_bytes(int f)
{
    return f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_SIGNED_INT32 ? 4
           : f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 ? 2
                                                                                                           : 1;
}

static CUresult make_array(uint64_t bytes, uint64_t *key)
{
    *key = 1;
    return fake_alloc(bytes, 1, key, NULL);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = d->Width * (d->Height ? d->Height : 1) * fmt_bytes(d->Format) * d->NumChannels;
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * fmt_bytes(d->Format)
                      * d->NumChannels;
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuArrayDestroy(CUarray a)
{
    return fake_free((uint64_t)(uintptr_t)a);
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    if (!a || !d || !d->Width || !levels)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        b += (w ? w : 1) * (d->Height ? (h ? h : 1) : 1) * (d->Depth ? (z ? z : 1) : 1) * fmt_bytes(d->Format)
             * d->NumChannels;
    }
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    return fake_free((uint64_t)(uintptr_t)a);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!free_b && !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    if (free_b)
        *free_b = total_bytes - used_bytes;
    if (total_b)
        *total_b = total_bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
    memset((void *)(uintptr_t)p, v, n);
    return CUDA_SUCCESS;
}

static unsigned long launches;
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params,
        (void)extra;
    launches++;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

/* With FAKE_INTERNAL_POINTERS=1 cuGetProcAddress answers with internal entry points, not the
 * exported symbols (as real drivers may): libvgpu must then route by name. */
static CUresult internal_alloc(CUdeviceptr *p, size_t bytes)
{
    return cuMemAlloc_v2(p, bytes);
}
static CUresult internal_alloc_async(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(p, bytes, s);
}
static CUresult internal_alloc_async_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync_ptsz(p, bytes, s);
}
static CUresult internal_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

static void *internal_pointer(const char *symbol, cuuint64_t flags)
{
    const char *e = getenv("FAKE_INTERNAL_POINTERS");
    if (!e || e[0] != '1')
        return NULL;
    int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (!strcmp(symbol, "cuMemAlloc"))
        return (void *)internal_alloc;
    if (!strcmp(symbol, "cuMemAllocAsync"))
        return ptds ? (void *)internal_alloc_async_ptsz : (void *)internal_alloc_async;
    if (!strcmp(symbol, "cuLaunchKernel"))
        return (void *)internal_launch;
    return NULL;
}

/* Like the real driver: base name + version + flags -> the exported versioned function. */
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    Dl_info info;
    void *self = NULL;
    if (dladdr((void *)cuGetProcAddress_v2, &info))
        self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    char name[256];
    void *p = internal_pointer(symbol, flags);
    if (!p && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        snprintf(name, sizeof name, "%s_ptsz", symbol);
        p = dlsym(self, name);
    }
    if (!p && version >= 3020) {
        snprintf(name, sizeof name, "%s_v2", symbol);
        p = dlsym(self, name);
    }
    if (!p)
        p = dlsym(self, symbol);
    if (self)
        dlclose(self);
    if (status)
        *status = p ? 0 : 1;
    if (!p) {
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
