/* The CUDA driver hooks: admission and accounting of every allocation path, virtualised memory
 * reports, context footprint, optional launch audit, and cuGetProcAddress routing. Every other
 * driver export is forwarded by the generated trampolines (gen/gen-forward.sh). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"
#include "hooks.h"
#include "region.h"
#include "vgpu.h"

/* ---- the hooked entry points: name, used to resolve the real one and to route lookups ---- */
#define CUDA_HOOKS(X) CUDA_MEMORY_HOOKS(X) CUDA_LAUNCH_HOOKS(X)
#define CUDA_MEMORY_HOOKS(X)                                                                                          \
    X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) \
    X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                            \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemCreate) X(cuMemRelease)          \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy) \
    X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy) X(cuCtxDestroy_v2)          \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2)                         \
    X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxReset_v2) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2)
#define CUDA_LAUNCH_HOOKS(X)                                                                                          \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)                            \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz)

/* Driver functions we call but do not hook. */
#define CUDA_HELPERS(X) X(cuCtxGetDevice) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)

#define ENUM_ENTRY(n) H_##n,
enum { CUDA_HOOKS(ENUM_ENTRY) CUDA_HELPERS(ENUM_ENTRY) H_COUNT };
#define NAME_ENTRY(n) #n,
static const char *const real_names[H_COUNT] = {CUDA_HOOKS(NAME_ENTRY) CUDA_HELPERS(NAME_ENTRY)};
static void *real_ptr[H_COUNT];
#define LAUNCH_FIRST H_cuLaunchKernel
#define LAUNCH_LAST H_cuGraphLaunch_ptsz
#define HOOK_COUNT (H_cuGraphLaunch_ptsz + 1)

#define REAL(name, ret, args) ((ret(*) args)real_ptr[H_##name])

/* ---- state ---- */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static void *real_lib;
static int ready; /* real library loaded and configuration good */
static struct vgpu_config cfg;
static int cfg_ok;
static struct vgpu_region *region;
static int slot = -1;
static int audit;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned primary_refs[VGPU_MAX_DEVICES];

static CUresult fwd_not_initialised(void)
{
    return CUDA_ERROR_NOT_INITIALIZED;
}
static CUresult fwd_not_supported(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
static int exiting; /* after our destructor: no more accounting */

static void load_real(void)
{
    char err[800];
    real_lib = vgpu_open_real("libcuda.so.1", "VGPU_REAL_LIBCUDA", err, sizeof err);
    if (!real_lib) {
        vgpu_log(VGPU_ERR, "%s", err);
        return;
    }
    for (int i = 0; i < H_COUNT; i++) {
        real_ptr[i] = dlsym(real_lib, real_names[i]);
        /* a hook whose driver function is missing (an older driver) answers "not supported" */
        if (!real_ptr[i] && i < HOOK_COUNT)
            real_ptr[i] = (void *)fwd_not_supported;
    }
}

static void at_fork_child(void)
{
    /* the child holds no GPU memory; it takes its own slot on first use */
    slot = -1;
    memset(primary_refs, 0, sizeof primary_refs);
    vgpu_track_reset();
}

static void install_audit(void);

static void load_config(void)
{
    char err[800];
    if (vgpu_config_load(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "vgpu: invalid configuration: %s; CUDA initialisation refused\n", err);
        return;
    }
    region = vgpu_region_map(cfg.region_dir, cfg.region_dir_explicit, 1, err, sizeof err);
    if (!region) {
        fprintf(stderr, "vgpu: VGPU_REGION_DIR=\"%s\": %s; CUDA initialisation refused\n", cfg.region_dir, err);
        return;
    }
    audit = cfg.compute_audit;
    cfg_ok = 1;
    if (audit)
        install_audit();
    pthread_atfork(NULL, NULL, at_fork_child);
    vgpu_log(VGPU_INFO, "quota from %s, enforce=%d, virtual_memory=%d", cfg.source, cfg.limit_enforce,
             cfg.virtual_memory);
}

/* 0 when the hooks may work; otherwise the CUDA error to return. */
static CUresult ensure_ready(void)
{
    if (__builtin_expect(__atomic_load_n(&ready, __ATOMIC_ACQUIRE), 1))
        return CUDA_SUCCESS;
    pthread_once(&load_once, load_real);
    if (!real_lib)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&config_once, load_config);
    if (!cfg_ok)
        return CUDA_ERROR_NOT_INITIALIZED;
    __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* Forwarding of the calls that have no hook (called by the generated trampolines once per name). */
VGPU_HIDDEN void *vgpu_fwd_resolve_cuda(unsigned index)
{
    pthread_once(&load_once, load_real);
    void *p = NULL;
    if (!real_lib)
        p = (void *)fwd_not_initialised;
    else if (!(p = dlsym(real_lib, vgpu_fwd_names_cuda[index]))) {
        vgpu_log(VGPU_DEBUG, "%s is not in the real driver", vgpu_fwd_names_cuda[index]);
        p = (void *)fwd_not_supported;
    }
    if (audit && cfg_ok) {
        void *h = vgpu_cuda_hook_for(p);
        if (h)
            p = h;
    }
    __atomic_store_n(&vgpu_fwd_table_cuda[index], p, __ATOMIC_RELEASE);
    return p;
}

/* ---- accounting helpers ---- */
static int current_device(int *dev)
{
    CUdevice d = -1;
    if (!real_ptr[H_cuCtxGetDevice] || REAL(cuCtxGetDevice, CUresult, (CUdevice *))(&d) != CUDA_SUCCESS)
        return -1;
    if (d < 0 || d >= VGPU_MAX_DEVICES)
        return -1;
    *dev = d;
    return 0;
}

static int admit(int dev, uint64_t bytes)
{
    if (exiting)
        return 0;
    if (vgpu_region_charge(region, &slot, dev, VGPU_DATA, bytes, cfg.limit[dev], cfg.limit_enforce) == 0)
        return 0;
    vgpu_log(VGPU_INFO, "refused %llu bytes on device %d: quota %llu bytes", (unsigned long long)bytes, dev,
             (unsigned long long)cfg.limit[dev]);
    return -1;
}

static void rollback(int dev, uint64_t bytes)
{
    if (exiting)
        return;
    vgpu_region_uncharge(region, &slot, dev, VGPU_ROLLBACK, bytes);
}

static void commit(int kind, uint64_t key, uint64_t bytes, int dev)
{
    uint64_t old_bytes = 0;
    int old_dev = 0;
    if (exiting)
        return;
    if (vgpu_track_put(kind, key, bytes, dev, &old_bytes, &old_dev) == 1)
        vgpu_region_uncharge(region, &slot, old_dev, VGPU_DATA, old_bytes);
}

static void released(int dev, uint64_t bytes)
{
    if (exiting)
        return;
    vgpu_region_uncharge(region, &slot, dev, VGPU_DATA, bytes);
}

/* Common shape of "allocate bytes on dev, keyed by what the driver wrote to *out". */
#define ALLOC_BODY(KIND, OUT, BYTES, DEV, CALL)                                                                       \
    do {                                                                                                              \
        if (admit(DEV, BYTES) != 0)                                                                                   \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ != CUDA_SUCCESS) {                                                                                    \
            rollback(DEV, BYTES);                                                                                     \
            return rc_;                                                                                               \
        }                                                                                                             \
        commit(KIND, (uint64_t)(uintptr_t)(OUT), BYTES, DEV);                                                         \
        return rc_;                                                                                                   \
    } while (0)

/* Common shape of a free: untracked keys go to the driver untouched. */
#define FREE_BODY(KIND, KEY, CALL)                                                                                    \
    do {                                                                                                              \
        uint64_t bytes_;                                                                                              \
        int dev_;                                                                                                     \
        if (vgpu_track_take(KIND, (uint64_t)(uintptr_t)(KEY), &bytes_, &dev_) != 0)                                   \
            return CALL;                                                                                              \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ == CUDA_SUCCESS)                                                                                      \
            released(dev_, bytes_);                                                                                   \
        else                                                                                                          \
            commit(KIND, (uint64_t)(uintptr_t)(KEY), bytes_, dev_);                                                   \
        return rc_;                                                                                                   \
    } while (0)

#define READY_OR_RETURN()                                                                                             \
    do {                                                                                                              \
        CUresult e_ = ensure_ready();                                                                                 \
        if (e_ != CUDA_SUCCESS)                                                                                       \
            return e_;                                                                                                \
    } while (0)

/* ---- init ---- */
static void record_uuids(void)
{
    int n = 0;
    if (!real_ptr[H_cuDeviceGetCount] || REAL(cuDeviceGetCount, CUresult, (int *))(&n) != CUDA_SUCCESS)
        return;
    for (int i = 0; i < n && i < VGPU_MAX_DEVICES; i++) {
        CUdevice d;
        CUuuid u;
        void *get_uuid = real_ptr[H_cuDeviceGetUuid_v2] ? real_ptr[H_cuDeviceGetUuid_v2] : real_ptr[H_cuDeviceGetUuid];
        if (REAL(cuDeviceGet, CUresult, (CUdevice *, int))(&d, i) != CUDA_SUCCESS || !get_uuid
            || ((CUresult(*)(CUuuid *, CUdevice))get_uuid)(&u, d) != CUDA_SUCCESS)
            continue;
        vgpu_region_lock(region);
        __atomic_fetch_add(&region->hdr.seq, 1, __ATOMIC_SEQ_CST);
        memcpy(region->hdr.devices[i].uuid, u.bytes, 16);
        region->hdr.devices[i].uuid_valid = 1;
        if (region->hdr.device_count < (uint32_t)i + 1)
            region->hdr.device_count = (uint32_t)i + 1;
        __atomic_fetch_add(&region->hdr.seq, 1, __ATOMIC_RELEASE);
        vgpu_region_unlock(region);
    }
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int attached_pid;

VGPU_EXPORT CUresult cuInit(unsigned int flags)
{
    READY_OR_RETURN();
    CUresult rc = REAL(cuInit, CUresult, (unsigned))(flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&init_lock);
    if (attached_pid != getpid()) {
        attached_pid = getpid();
        slot = vgpu_region_attach(region, &cfg);
        record_uuids();
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

/* ---- device memory ---- */
VGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    READY_OR_RETURN();
    int dev;
    if (!dptr || size == 0 || current_device(&dev) != 0)
        return REAL(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))(dptr, size);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))(dptr, size));
}

VGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    READY_OR_RETURN();
    int dev;
    if (!dptr || size == 0 || current_device(&dev) != 0)
        return REAL(cuMemAllocManaged, CUresult, (CUdeviceptr *, size_t, unsigned))(dptr, size, flags);
    ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev,
               REAL(cuMemAllocManaged, CUresult, (CUdeviceptr *, size_t, unsigned))(dptr, size, flags));
}

VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                        unsigned int elem)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    fn_t real = REAL(cuMemAllocPitch_v2, CUresult, (CUdeviceptr *, size_t *, size_t, size_t, unsigned));
    int dev;
    uint64_t estimate;
    if (!dptr || !pitch || !width || !height || current_device(&dev) != 0
        || __builtin_mul_overflow((uint64_t)((width + 511) & ~(size_t)511), (uint64_t)height, &estimate))
        return real(dptr, pitch, width, height, elem);
    if (admit(dev, estimate) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, pitch, width, height, elem);
    if (rc != CUDA_SUCCESS) {
        rollback(dev, estimate);
        return rc;
    }
    uint64_t actual = (uint64_t)*pitch * height;
    if (actual != estimate) {
        /* charge what the driver really took */
        rollback(dev, estimate);
        if (admit(dev, actual) != 0) {
            REAL(cuMemFree_v2, CUresult, (CUdeviceptr))(*dptr);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    commit(VGPU_K_PTR, *dptr, actual, dev);
    return rc;
}

VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_PTR, dptr, REAL(cuMemFree_v2, CUresult, (CUdeviceptr))(dptr));
}

/* ---- stream-ordered allocation ---- */
#define ASYNC_ALLOC(NAME)                                                                                             \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUstream stream)                                        \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || current_device(&dev) != 0)                                                          \
            return REAL(NAME, CUresult, (CUdeviceptr *, size_t, CUstream))(dptr, size, stream);                       \
        ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev,                                                                      \
                   REAL(NAME, CUresult, (CUdeviceptr *, size_t, CUstream))(dptr, size, stream));                      \
    }
ASYNC_ALLOC(cuMemAllocAsync)
ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define POOL_ALLOC(NAME)                                                                                              \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)                     \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        typedef CUresult (*fn_t)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);                                      \
        fn_t real = (fn_t)real_ptr[H_##NAME];                                                                         \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || current_device(&dev) != 0)                                                          \
            return real(dptr, size, pool, stream);                                                                    \
        ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, real(dptr, size, pool, stream));                                     \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

#define ASYNC_FREE(NAME)                                                                                              \
    VGPU_EXPORT CUresult NAME(CUdeviceptr dptr, CUstream stream)                                                      \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        FREE_BODY(VGPU_K_PTR, dptr, REAL(NAME, CUresult, (CUdeviceptr, CUstream))(dptr, stream));                     \
    }
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)

/* ---- virtual memory management (physical handles) ---- */
VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                             unsigned long long);
    fn_t real = (fn_t)real_ptr[H_cuMemCreate];
    /* only device memory counts; host (NUMA) locations do not */
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || prop->location.id < 0 || prop->location.id >= VGPU_MAX_DEVICES)
        return real(handle, size, prop, flags);
    int dev = prop->location.id;
    ALLOC_BODY(VGPU_K_HANDLE, *handle, size, dev, real(handle, size, prop, flags));
}

VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_HANDLE, handle, REAL(cuMemRelease, CUresult, (CUmemGenericAllocationHandle))(handle));
}

/* ---- arrays ---- */
static uint64_t format_bytes(int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4; /* 32-bit formats; the block-compressed ones are smaller, this errs high */
    }
}

/* Bytes of a w x h x d array (0 = overflow). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned channels)
{
    uint64_t b = format_bytes(format) * (channels ? channels : 1), r;
    if (__builtin_mul_overflow(b, (uint64_t)w, &r) || __builtin_mul_overflow(r, (uint64_t)(h ? h : 1), &r)
        || __builtin_mul_overflow(r, (uint64_t)(d ? d : 1), &r))
        return 0;
    return r;
}

VGPU_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    fn_t real = (fn_t)real_ptr[H_cuArrayCreate_v2];
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || current_device(&dev) != 0)
        return real(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, real(arr, desc));
}

VGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    fn_t real = (fn_t)real_ptr[H_cuArray3DCreate_v2];
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || current_device(&dev) != 0)
        return real(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, real(arr, desc));
}

VGPU_EXPORT CUresult cuArrayDestroy(CUarray arr)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_ARRAY, arr, REAL(cuArrayDestroy, CUresult, (CUarray))(arr));
}

VGPU_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                            unsigned int levels)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
    fn_t real = (fn_t)real_ptr[H_cuMipmappedArrayCreate];
    int dev;
    uint64_t bytes = 0;
    for (unsigned l = 0; desc && l < levels && l < 64; l++) {
        size_t w = desc->Width >> l, h = desc->Height >> l, d = desc->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, desc->Height ? (h ? h : 1) : 0, desc->Depth ? (d ? d : 1) : 0,
                                 desc->Format, desc->NumChannels);
        if (!b || __builtin_add_overflow(bytes, b, &bytes)) {
            bytes = 0;
            break;
        }
    }
    if (!arr || !bytes || current_device(&dev) != 0)
        return real(arr, desc, levels);
    ALLOC_BODY(VGPU_K_MIPMAP, *arr, bytes, dev, real(arr, desc, levels));
}

VGPU_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    READY_OR_RETURN();
    FREE_BODY(VGPU_K_MIPMAP, arr, REAL(cuMipmappedArrayDestroy, CUresult, (CUmipmappedArray))(arr));
}

/* ---- contexts: each one is charged cfg.ctx_reserve, reported as reserved memory ---- */
static void ctx_charge(int dev, int sign)
{
    if (!cfg.ctx_reserve || dev < 0 || dev >= VGPU_MAX_DEVICES || exiting)
        return;
    if (sign > 0)
        vgpu_region_charge(region, &slot, dev, VGPU_CTX, cfg.ctx_reserve, 0, 0);
    else
        vgpu_region_uncharge(region, &slot, dev, VGPU_CTX, cfg.ctx_reserve);
}

static CUresult ctx_created(CUresult rc, CUcontext *pctx, CUdevice dev)
{
    if (rc == CUDA_SUCCESS && pctx && cfg.ctx_reserve && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        uint64_t ob;
        int od;
        if (vgpu_track_put(VGPU_K_CTX, (uint64_t)(uintptr_t)*pctx, cfg.ctx_reserve, dev, &ob, &od) == 1)
            ctx_charge(od, -1);
        ctx_charge(dev, +1);
    }
    return rc;
}

VGPU_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate, CUresult, (CUcontext *, unsigned, CUdevice))(pctx, flags, dev), pctx, dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate_v2, CUresult, (CUcontext *, unsigned, CUdevice))(pctx, flags, dev), pctx,
                       dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int nparams, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(REAL(cuCtxCreate_v3, CUresult, (CUcontext *, void *, int, unsigned, CUdevice))(
                           pctx, params, nparams, flags, dev),
                       pctx, dev);
}

VGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    READY_OR_RETURN();
    return ctx_created(
        REAL(cuCtxCreate_v4, CUresult, (CUcontext *, void *, unsigned, CUdevice))(pctx, params, flags, dev), pctx,
        dev);
}

static CUresult ctx_destroy(int which, CUcontext ctx)
{
    READY_OR_RETURN();
    CUresult (*real)(CUcontext) = (CUresult(*)(CUcontext))real_ptr[which];
    uint64_t bytes;
    int dev;
    if (vgpu_track_take(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, &bytes, &dev) != 0)
        return real(ctx);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS)
        ctx_charge(dev, -1);
    else
        vgpu_track_put(VGPU_K_CTX, (uint64_t)(uintptr_t)ctx, bytes, dev, &bytes, &dev);
    return rc;
}

VGPU_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(H_cuCtxDestroy, ctx);
}

VGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(H_cuCtxDestroy_v2, ctx);
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    READY_OR_RETURN();
    CUresult rc = REAL(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))(pctx, dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        pthread_mutex_lock(&ctx_lock);
        if (primary_refs[dev]++ == 0)
            ctx_charge(dev, +1);
        pthread_mutex_unlock(&ctx_lock);
    }
    return rc;
}

static CUresult primary_release(int which, CUdevice dev, int reset)
{
    READY_OR_RETURN();
    CUresult rc = ((CUresult(*)(CUdevice))real_ptr[which])(dev);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < VGPU_MAX_DEVICES) {
        pthread_mutex_lock(&ctx_lock);
        if (primary_refs[dev] > 0) {
            primary_refs[dev] = reset ? 0 : primary_refs[dev] - 1;
            if (primary_refs[dev] == 0)
                ctx_charge(dev, -1);
        }
        pthread_mutex_unlock(&ctx_lock);
    }
    return rc;
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_release(H_cuDevicePrimaryCtxRelease, dev, 0);
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_release(H_cuDevicePrimaryCtxRelease_v2, dev, 0);
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_release(H_cuDevicePrimaryCtxReset, dev, 1);
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_release(H_cuDevicePrimaryCtxReset_v2, dev, 1);
}

/* ---- what the program sees ---- */
static uint64_t container_use(int dev)
{
    const struct vgpu_region_device *d = &region->hdr.devices[dev];
    return __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED) + __atomic_load_n(&d->ctx_bytes, __ATOMIC_RELAXED);
}

VGPU_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    READY_OR_RETURN();
    typedef CUresult (*fn_t)(size_t *, size_t *);
    fn_t real = (fn_t)real_ptr[H_cuMemGetInfo_v2];
    CUresult rc = real(free_bytes, total_bytes);
    int dev;
    if (rc != CUDA_SUCCESS || !cfg.virtual_memory || current_device(&dev) != 0 || !cfg.limit[dev])
        return rc;
    size_t f = 0, t = 0;
    if (free_bytes && total_bytes) {
        f = *free_bytes;
        t = *total_bytes;
    } else if (real(&f, &t) != CUDA_SUCCESS) {
        return rc;
    }
    uint64_t total = cfg.limit[dev] < t ? cfg.limit[dev] : t;
    uint64_t used = container_use(dev);
    if (used > total)
        used = total;
    uint64_t avail = total - used;
    if (avail > f)
        avail = f; /* never more than the GPU really has free */
    if (free_bytes)
        *free_bytes = (size_t)avail;
    if (total_bytes)
        *total_bytes = (size_t)total;
    return rc;
}

VGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    READY_OR_RETURN();
    CUresult rc = REAL(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice))(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes && cfg.virtual_memory && dev >= 0 && dev < VGPU_MAX_DEVICES && cfg.limit[dev]
        && cfg.limit[dev] < *bytes)
        *bytes = (size_t)cfg.limit[dev];
    return rc;
}

/* ---- launch audit (GPU_COMPUTE_AUDIT=1). Launches are plain generated forwards; only when auditing
 * are these wrappers put into the forwarding table and handed out by cuGetProcAddress. ---- */
static void count_launch(void)
{
    int s = slot;
    if (audit && region && s >= 0 && (unsigned)s < VGPU_MAX_SLOTS)
        __atomic_fetch_add(&region->slots[s].launches, 1, __ATOMIC_RELAXED);
}

#define LAUNCH11(NAME)                                                                                                \
    static CUresult audit_##NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
                              unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)              \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME, CUresult,                                                                                   \
                    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,      \
                     void **, void **))(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);                     \
    }
LAUNCH11(cuLaunchKernel)
LAUNCH11(cuLaunchKernel_ptsz)

#define LAUNCH_COOP(NAME)                                                                                             \
    static CUresult audit_##NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,          \
                              unsigned bz, unsigned shmem, CUstream stream, void **params)                            \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME, CUresult,                                                                                   \
                    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,      \
                     void **))(f, gx, gy, gz, bx, by, bz, shmem, stream, params);                                     \
    }
LAUNCH_COOP(cuLaunchCooperativeKernel)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(NAME)                                                                                               \
    static CUresult audit_##NAME(const void *config, CUfunction f, void **params, void **extra)                          \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME, CUresult, (const void *, CUfunction, void **, void **))(config, f, params, extra);          \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define GRAPH_LAUNCH(NAME)                                                                                            \
    static CUresult audit_##NAME(CUgraphExec exec, CUstream stream)                                                      \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME, CUresult, (CUgraphExec, CUstream))(exec, stream);                                           \
    }
GRAPH_LAUNCH(cuGraphLaunch)
GRAPH_LAUNCH(cuGraphLaunch_ptsz)

/* ---- cuGetProcAddress: route the driver's answer to our hook with the same ABI ---- */
VGPU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status);
#define HOOK_ADDR(n) (void *)n,
#define AUDIT_ADDR(n) (void *)audit_##n,
static void *const hook_ptr[HOOK_COUNT] = {CUDA_MEMORY_HOOKS(HOOK_ADDR) CUDA_LAUNCH_HOOKS(AUDIT_ADDR)};

/* With auditing on, point the launch trampolines at the audit wrappers. */
static void install_audit(void)
{
    for (unsigned i = 0; i < vgpu_fwd_count_cuda; i++)
        for (int h = LAUNCH_FIRST; h <= LAUNCH_LAST; h++)
            if (strcmp(vgpu_fwd_names_cuda[i], real_names[h]) == 0 && real_ptr[h] != (void *)fwd_not_supported)
                __atomic_store_n(&vgpu_fwd_table_cuda[i], hook_ptr[h], __ATOMIC_RELEASE);
}

/* cuGetProcAddress takes a base name and a CUDA version; the driver may answer with an internal
 * pointer that no exported symbol has, so identity alone is not enough. This table gives, for
 * each base name we hook, the first version at which the driver hands out the ABI of our hook
 * (what cuda.h maps the name to), and the _ptsz variant for per-thread default stream callers. */
static const struct {
    const char *base;
    int min_version;
    int legacy, ptsz; /* hook indexes */
} by_name[] = {
    {"cuInit", 2000, H_cuInit, H_cuInit},
    {"cuGetProcAddress", 12000, H_cuGetProcAddress_v2, H_cuGetProcAddress_v2},
    {"cuGetProcAddress", 11030, H_cuGetProcAddress, H_cuGetProcAddress},
    {"cuMemAlloc", 3020, H_cuMemAlloc_v2, H_cuMemAlloc_v2},
    {"cuMemAllocPitch", 3020, H_cuMemAllocPitch_v2, H_cuMemAllocPitch_v2},
    {"cuMemFree", 3020, H_cuMemFree_v2, H_cuMemFree_v2},
    {"cuMemAllocManaged", 6000, H_cuMemAllocManaged, H_cuMemAllocManaged},
    {"cuMemAllocAsync", 11020, H_cuMemAllocAsync, H_cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, H_cuMemAllocFromPoolAsync, H_cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", 11020, H_cuMemFreeAsync, H_cuMemFreeAsync_ptsz},
    {"cuMemCreate", 10020, H_cuMemCreate, H_cuMemCreate},
    {"cuMemRelease", 10020, H_cuMemRelease, H_cuMemRelease},
    {"cuArrayCreate", 3020, H_cuArrayCreate_v2, H_cuArrayCreate_v2},
    {"cuArray3DCreate", 3020, H_cuArray3DCreate_v2, H_cuArray3DCreate_v2},
    {"cuArrayDestroy", 2000, H_cuArrayDestroy, H_cuArrayDestroy},
    {"cuMipmappedArrayCreate", 5000, H_cuMipmappedArrayCreate, H_cuMipmappedArrayCreate},
    {"cuMipmappedArrayDestroy", 5000, H_cuMipmappedArrayDestroy, H_cuMipmappedArrayDestroy},
    {"cuMemGetInfo", 3020, H_cuMemGetInfo_v2, H_cuMemGetInfo_v2},
    {"cuDeviceTotalMem", 3020, H_cuDeviceTotalMem_v2, H_cuDeviceTotalMem_v2},
    {"cuDevicePrimaryCtxRetain", 7000, H_cuDevicePrimaryCtxRetain, H_cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 11000, H_cuDevicePrimaryCtxRelease_v2, H_cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxReset", 11000, H_cuDevicePrimaryCtxReset_v2, H_cuDevicePrimaryCtxReset_v2},
    {"cuCtxDestroy", 4000, H_cuCtxDestroy_v2, H_cuCtxDestroy_v2},
    {"cuLaunchKernel", 4000, H_cuLaunchKernel, H_cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, H_cuLaunchKernelEx, H_cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, H_cuLaunchCooperativeKernel, H_cuLaunchCooperativeKernel_ptsz},
    {"cuGraphLaunch", 10000, H_cuGraphLaunch, H_cuGraphLaunch_ptsz},
};

static int is_launch(int h)
{
    return h >= LAUNCH_FIRST && h <= LAUNCH_LAST;
}

static int per_thread_stream(cuuint64_t flags)
{
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return 1;
    if (flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM)
        return 0;
    /* CU_GET_PROC_ADDRESS_DEFAULT follows the process's setting, as the driver does */
    const char *e = getenv("CUDA_API_PER_THREAD_DEFAULT_STREAM");
    return e && e[0] == '1';
}

static void *route(const char *symbol, void *p, int version, cuuint64_t flags)
{
    for (int i = 0; i < HOOK_COUNT; i++) {
        if (real_ptr[i] != p)
            continue;
        if (is_launch(i) && !audit)
            return p; /* launches are not intercepted unless audited */
        if (symbol)
            vgpu_log(VGPU_DEBUG, "cuGetProcAddress(%s, %d): hook by identity", symbol, version);
        return hook_ptr[i];
    }
    if (!symbol)
        return p;
    for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++) {
        if (strcmp(symbol, by_name[i].base) != 0 || version < by_name[i].min_version)
            continue;
        int h = per_thread_stream(flags) ? by_name[i].ptsz : by_name[i].legacy;
        if (is_launch(h) && !audit)
            return p;
        vgpu_log(VGPU_DEBUG, "cuGetProcAddress(%s, %d): hook by name", symbol, version);
        return hook_ptr[h];
    }
    return p;
}

VGPU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    /* runtimes resolve their entry points before cuInit: the switches (audit) must be known */
    pthread_once(&load_once, load_real);
    if (real_lib)
        pthread_once(&config_once, load_config);
    if (!real_ptr[H_cuGetProcAddress])
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = REAL(cuGetProcAddress, CUresult, (const char *, void **, int, cuuint64_t))(symbol, pfn, version,
                                                                                             flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = route(symbol, *pfn, version, flags);
    return rc;
}

VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    pthread_once(&load_once, load_real);
    if (real_lib)
        pthread_once(&config_once, load_config);
    if (!real_ptr[H_cuGetProcAddress_v2])
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = REAL(cuGetProcAddress_v2, CUresult, (const char *, void **, int, cuuint64_t, int *))(
        symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = route(symbol, *pfn, version, flags);
    return rc;
}

/* Used by the dlsym override of libvgpu.so: our hook for a real driver pointer, or NULL. */
VGPU_HIDDEN void *vgpu_cuda_hook_for(void *real)
{
    pthread_once(&load_once, load_real);
    if (!real)
        return NULL;
    void *h = route(NULL, real, 0, 0);
    return h == real ? NULL : h;
}

/* At exit our memory goes back to the container at once, without waiting for a sweep. */
__attribute__((destructor)) static void vgpu_cuda_exit(void)
{
    exiting = 1;
    if (region && slot >= 0 && attached_pid == getpid())
        vgpu_region_detach(region, slot);
}
