/* The fake CUDA driver's memory with lifetimes of its own (tests/README.md, "Memory"), as the
 * real driver has them (measured on an H200, driver 580):
 *  - stream-ordered pools: an allocation grows the pool's reserve (in FAKE_POOL_GRANULE_MIB
 *    steps); a free keeps the memory in the pool; a synchronize (cuCtxSynchronize,
 *    cuStreamSynchronize) gives back what the pool keeps above its release threshold (default
 *    0), cuMemPoolTrimTo at once (the fake frees at once; on the H200 a trim right after an
 *    unsynchronized cuMemFreeAsync released nothing, so tests synchronize first); other
 *    allocations in between give back nothing;
 *  - physical handles (cuMemCreate): the memory lives while the handle is held (cuMemCreate,
 *    each cuMemRetainAllocationHandle, each import), mapped (cuMemMap), bound to a multicast
 *    object or a sparse array, or exported to a shareable handle (until the exporter exits);
 *  - legacy IPC and pool imports map memory of the exporter: the importer is not charged;
 *  - pinned host memory is host memory. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_gpu.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *grow(void *array, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return array;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *a = realloc(array, n * size);
    if (a)
        *cap = n;
    return a;
}

/* ---------------------------------------------------------------- stream-ordered pools */
struct CUmemPoolHandle_st {
    int live, dev, destroyed, imported;
    uint64_t reserved, used, threshold, reserved_high, used_high;
};
static struct CUmemPoolHandle_st default_pool[FAKE_MAX_GPUS];
static CUmemoryPool current_pool[FAKE_MAX_GPUS];
static CUmemoryPool made_pools[256];
static int nmade;

struct pool_block {
    CUdeviceptr p;
    uint64_t bytes;
    CUmemoryPool pool;
};
static struct pool_block *pblocks;
static size_t npblocks, cap_pblocks;

static CUmemoryPool default_of(int dev)
{
    CUmemoryPool p = &default_pool[dev];
    if (!p->live)
        *p = (struct CUmemPoolHandle_st){.live = 1, .dev = dev};
    return p;
}

CUmemoryPool fake_current_pool(int dev)
{
    pthread_mutex_lock(&lock);
    CUmemoryPool p = current_pool[dev] ? current_pool[dev] : default_of(dev);
    pthread_mutex_unlock(&lock);
    return p;
}

static uint64_t granule(void)
{
    uint64_t g = fake_env_bytes("FAKE_POOL_GRANULE_MIB", 2);
    return g ? g : FAKE_MIB;
}

/* Give back what the pool keeps beyond max(used, keep), in whole granules. Caller holds lock. */
static void shrink_locked(CUmemoryPool pool, uint64_t keep)
{
    uint64_t g = granule(), target = pool->used > keep ? pool->used : keep;
    target = target > UINT64_MAX - g ? UINT64_MAX : (target + g - 1) / g * g;
    if (pool->destroyed && pool->used == 0)
        target = 0;
    if (pool->reserved > target) {
        fake_device_release(pool->dev, pool->reserved - target);
        pool->reserved = target;
    }
}

void fake_pools_synchronized(void)
{
    pthread_mutex_lock(&lock);
    for (int d = 0; d < FAKE_MAX_GPUS; d++)
        if (default_pool[d].live)
            shrink_locked(&default_pool[d], default_pool[d].threshold);
    for (int i = 0; i < nmade; i++)
        if (made_pools[i]->live)
            shrink_locked(made_pools[i], made_pools[i]->threshold);
    pthread_mutex_unlock(&lock);
}

CUresult fake_pool_alloc(CUmemoryPool pool, uint64_t bytes, CUdeviceptr *p)
{
    if (!pool || !pool->live || pool->destroyed || pool->imported || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (pool->used + bytes > pool->reserved) {
        uint64_t g = granule(), more = (pool->used + bytes - pool->reserved + g - 1) / g * g;
        if (fake_device_reserve(pool->dev, more) != 0) {
            pthread_mutex_unlock(&lock);
            munmap(m, bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pool->reserved += more;
    }
    struct pool_block *t = grow(pblocks, &cap_pblocks, npblocks + 1, sizeof *pblocks);
    if (!t) {
        shrink_locked(pool, pool->threshold);
        pthread_mutex_unlock(&lock);
        munmap(m, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pblocks = t;
    pool->used += bytes;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    if (pool->reserved > pool->reserved_high)
        pool->reserved_high = pool->reserved;
    *p = (CUdeviceptr)(uintptr_t)m;
    pblocks[npblocks++] = (struct pool_block){*p, bytes, pool};
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* The memory stays in the pool: given back at a synchronize above the threshold, or a trim. */
int fake_pool_free(CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < npblocks; i++) {
        if (pblocks[i].p != p)
            continue;
        CUmemoryPool pool = pblocks[i].pool;
        pool->used -= pblocks[i].bytes;
        munmap((void *)(uintptr_t)p, pblocks[i].bytes);
        pblocks[i] = pblocks[--npblocks];
        if (pool->destroyed && pool->used == 0)
            shrink_locked(pool, 0);
        pthread_mutex_unlock(&lock);
        return 1;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s)
{
    if (!p || !bytes || !pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    if (fake_capture_alloc(s, bytes, pool->dev, p, &rc))
        return rc;
    return fake_pool_alloc(pool, bytes, p);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(p, bytes, pool, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    CUresult rc;
    if (fake_capture_free(s, p, &rc))
        return rc; /* a free node of the graph being captured */
    if (fake_graph_free(p, &rc))
        return rc;
    if (fake_pool_free(p))
        return CUDA_SUCCESS;
    return fake_free(p); /* cuMemFreeAsync of an ordinary allocation: allowed */
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return cuMemFreeAsync(p, s);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    if (!pool || !fake_valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *pool = default_of(d);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d)
{
    if (!pool || !fake_valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    *pool = fake_current_pool(d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool)
{
    if (!pool || !fake_valid_dev(d) || !pool->live || pool->dev != d || pool->imported)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    current_pool[d] = pool;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* CUDA 13: the same by location (device locations only here) */
EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *loc, int type)
{
    if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    return cuDeviceGetDefaultMemPool(pool, loc->id);
}

EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *loc, int type)
{
    if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    return cuDeviceGetMemPool(pool, loc->id);
}

EXPORT CUresult cuMemSetMemPool(CUmemLocation *loc, int type, CUmemoryPool pool)
{
    if (!loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    return cuDeviceSetMemPool(loc->id, pool);
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fake_valid_dev(props->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    CUmemoryPool p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (struct CUmemPoolHandle_st){.live = 1, .dev = props->location.id};
    pthread_mutex_lock(&lock);
    if (nmade == (int)(sizeof made_pools / sizeof made_pools[0])) {
        pthread_mutex_unlock(&lock);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    made_pools[nmade++] = p;
    pthread_mutex_unlock(&lock);
    *pool = p;
    return CUDA_SUCCESS;
}

/* With allocations outstanding the pool's memory goes once they are freed, as the driver does. */
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    if (!pool || !pool->live || pool->destroyed || (pool >= default_pool && pool < default_pool + FAKE_MAX_GPUS))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    pool->destroyed = 1;
    for (int d = 0; d < FAKE_MAX_GPUS; d++)
        if (current_pool[d] == pool)
            current_pool[d] = NULL;
    if (!pool->imported)
        shrink_locked(pool, 0);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    if (!pool || !pool->live)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    shrink_locked(pool, keep);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
    if (!pool || !pool->live || !value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    memcpy(&v, value, sizeof v);
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        pool->threshold = v;
    else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH && v == 0)
        pool->reserved_high = pool->reserved;
    else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH && v == 0)
        pool->used_high = pool->used;
    else if (attr < 1 || attr > 3)
        rc = CUDA_ERROR_INVALID_VALUE; /* the reuse policies (1-3) are accepted and ignored */
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
    if (!pool || !pool->live || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t v = attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD    ? pool->threshold
                 : attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? pool->reserved
                 : attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH    ? pool->reserved_high
                 : attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT     ? pool->used
                                                                : pool->used_high;
    pthread_mutex_unlock(&lock);
    if (attr < CU_MEMPOOL_ATTR_RELEASE_THRESHOLD || attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(value, &v, sizeof v);
    return CUDA_SUCCESS;
}

/* Shareable pools and pointers: the exporter's memory; an imported pool allocates nothing. */
struct pool_export {
    uint32_t magic, pid;
    uint64_t bytes;
    char pad[48];
};
#define POOL_EXPORT_MAGIC 0x4c4f4f50u /* "POOL" */

EXPORT CUresult cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool, int type, unsigned long long flags)
{
    (void)flags;
    if (!out || !pool || !pool->live || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fake-gpu-pool", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle, int type,
                                                   unsigned long long flags)
{
    (void)handle, (void)flags;
    if (!pool || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemoryPool p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (struct CUmemPoolHandle_st){.live = 1, .dev = fake_current_dev() < 0 ? 0 : fake_current_dev(), .imported = 1};
    *pool = p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolExportPointer(void *data, CUdeviceptr p)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < npblocks; i++)
        if (pblocks[i].p == p) {
            struct pool_export e = {POOL_EXPORT_MAGIC, (uint32_t)getpid(), pblocks[i].bytes, {0}};
            memcpy(data, &e, sizeof e);
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, void *data)
{
    struct pool_export e;
    if (!p || !pool || !data)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&e, data, sizeof e);
    if (e.magic != POOL_EXPORT_MAGIC || !e.bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    CUresult rc = fake_block_add(e.bytes, -1, &key, NULL); /* a mapping of the exporter's memory */
    if (rc == CUDA_SUCCESS)
        *p = key;
    return rc;
}

/* ---------------------------------------------------------------- physical handles */
struct vhandle {
    uint64_t h, bytes;
    int dev;       /* -1: host memory or memory of another process (imported) */
    int refs;      /* cuMemCreate, retains, imports */
    int maps;      /* live cuMemMap mappings */
    int bound;     /* multicast and sparse array bindings */
    int exported;  /* a shareable handle exists: lives until the process exits */
    int multicast; /* a multicast object (no memory of its own) */
};
struct vmap {
    CUdeviceptr va;
    uint64_t size, h;
};
struct vbind {
    uint64_t owner, h; /* multicast handle or sparse array, bound physical handle */
};
static struct vhandle *handles;
static size_t nhandles, cap_handles;
static struct vmap *maps;
static size_t nmaps, cap_maps;
static struct vbind *binds;
static size_t nbinds, cap_binds;
static uint64_t next_vhandle = 0x100000;

static struct vhandle *find_handle(uint64_t h)
{
    for (size_t i = 0; i < nhandles; i++)
        if (handles[i].h == h)
            return &handles[i];
    return NULL;
}

static CUresult new_handle(uint64_t bytes, int dev, int multicast, uint64_t *h)
{
    struct vhandle *t = grow(handles, &cap_handles, nhandles + 1, sizeof *handles);
    if (!t)
        return CUDA_ERROR_OUT_OF_MEMORY;
    handles = t;
    if (dev >= 0 && fake_device_reserve(dev, bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = next_vhandle++;
    handles[nhandles++] = (struct vhandle){*h, bytes, dev, 1, 0, 0, 0, multicast};
    return CUDA_SUCCESS;
}

static void unbind_locked(uint64_t owner);

/* The memory goes when nothing keeps it any more (a multicast object's bindings go with it).
 * Caller holds lock. */
static void maybe_free_locked(struct vhandle *v)
{
    if (v->refs > 0 || v->maps > 0 || v->bound > 0 || v->exported)
        return;
    struct vhandle gone = *v;
    *v = handles[--nhandles];
    if (gone.dev >= 0)
        fake_device_release(gone.dev, gone.bytes);
    if (gone.multicast)
        unbind_locked(gone.h);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    if (!h || !prop || !bytes || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    int device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    if (device && !fake_valid_dev(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    uint64_t key;
    CUresult rc = new_handle(bytes, device ? prop->location.id : -1, 0, &key);
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        *h = key;
    return rc;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&lock);
    struct vhandle *v = find_handle(h);
    if (!v || v->refs <= 0) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    v->refs--;
    maybe_free_locked(v);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
    (void)option;
    if (!g || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *g = 2 * FAKE_MIB;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags)
{
    (void)align, (void)addr, (void)flags;
    if (!ptr || !size)
        return CUDA_ERROR_INVALID_VALUE;
    void *m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    return ptr && size && munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags)
{
    if (!ptr || !size || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vhandle *v = find_handle(h);
    CUresult rc = CUDA_SUCCESS;
    if (!v || offset > v->bytes || size > v->bytes - offset)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < nmaps; i++)
        if (ptr < maps[i].va + maps[i].size && maps[i].va < ptr + size)
            rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
    struct vmap *t = rc == CUDA_SUCCESS ? grow(maps, &cap_maps, nmaps + 1, sizeof *maps) : NULL;
    if (rc == CUDA_SUCCESS && !t)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        maps = t;
        maps[nmaps++] = (struct vmap){ptr, size, h};
        v->maps++;
        mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Unmaps every mapping of the range, which must start at a mapping. */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    pthread_mutex_lock(&lock);
    int found = 0;
    for (size_t i = 0; i < nmaps; i++)
        found |= maps[i].va == ptr;
    if (!found || !size) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < nmaps;) {
        if (maps[i].va >= ptr && maps[i].va < ptr + size) {
            struct vmap m = maps[i];
            maps[i] = maps[--nmaps];
            mprotect((void *)(uintptr_t)m.va, m.size, PROT_NONE);
            madvise((void *)(uintptr_t)m.va, m.size, MADV_DONTNEED);
            struct vhandle *v = find_handle(m.h);
            if (v) {
                v->maps--;
                maybe_free_locked(v);
            }
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    return ptr && size && desc && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The handle mapped at addr, with a reference of its own (its own cuMemRelease). */
static struct vhandle *handle_at_locked(CUdeviceptr addr)
{
    for (size_t i = 0; i < nmaps; i++)
        if (addr >= maps[i].va && addr < maps[i].va + maps[i].size)
            return find_handle(maps[i].h);
    return NULL;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vhandle *v = handle_at_locked((CUdeviceptr)(uintptr_t)addr);
    if (v) {
        v->refs++;
        *h = v->h;
    }
    pthread_mutex_unlock(&lock);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

struct handle_export {
    uint32_t magic, pid;
    uint64_t bytes;
};
#define HANDLE_EXPORT_MAGIC 0x444e4148u /* "HAND" */

/* A file descriptor standing for the handle; its memory lives until the exporter exits. */
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
                                             unsigned long long flags)
{
    (void)flags;
    if (!out || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct vhandle *v = find_handle(h);
    int fd = v && !v->multicast ? memfd_create("fake-gpu-handle", MFD_CLOEXEC) : -1;
    struct handle_export e = {HANDLE_EXPORT_MAGIC, (uint32_t)getpid(), v ? v->bytes : 0};
    if (fd >= 0 && pwrite(fd, &e, sizeof e, 0) != (ssize_t)sizeof e) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0)
        v->exported = 1;
    pthread_mutex_unlock(&lock);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

/* The importer holds a handle to the exporter's memory: it takes no memory itself. */
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type)
{
    struct handle_export e;
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        || pread((int)(intptr_t)os_handle, &e, sizeof e, 0) != (ssize_t)sizeof e || e.magic != HANDLE_EXPORT_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t key;
    CUresult rc = new_handle(e.bytes, -1, 0, &key);
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        *h = key;
    return rc;
}

/* ---------------------------------------------------------------- multicast, sparse arrays */
static CUresult bind_locked(uint64_t owner, struct vhandle *v)
{
    struct vbind *t = grow(binds, &cap_binds, nbinds + 1, sizeof *binds);
    if (!t)
        return CUDA_ERROR_OUT_OF_MEMORY;
    binds = t;
    binds[nbinds++] = (struct vbind){owner, v->h};
    v->bound++;
    return CUDA_SUCCESS;
}

static void unbind_locked(uint64_t owner)
{
    for (size_t i = 0; i < nbinds;)
        if (binds[i].owner == owner) {
            struct vhandle *v = find_handle(binds[i].h);
            binds[i] = binds[--nbinds];
            if (v) {
                v->bound--;
                maybe_free_locked(v);
            }
        } else {
            i++;
        }
}

EXPORT CUresult cuMulticastCreate(CUmemGenericAllocationHandle *h, const CUmulticastObjectProp *prop)
{
    if (!h || !prop || !prop->size || !prop->numDevices)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t key;
    CUresult rc = new_handle(prop->size, -1, 1, &key);
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        *h = key;
    return rc;
}

EXPORT CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mc, CUdevice dev)
{
    return fake_valid_dev(dev) && mc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMulticastGetGranularity(size_t *g, const CUmulticastObjectProp *prop, int option)
{
    (void)option;
    if (!g || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *g = 2 * FAKE_MIB;
    return CUDA_SUCCESS;
}

/* Binding keeps the bound memory alive until the multicast object is unbound or released. */
EXPORT CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_offset, CUmemGenericAllocationHandle h,
                                   size_t offset, size_t size, unsigned long long flags)
{
    (void)mc_offset, (void)offset, (void)size, (void)flags;
    pthread_mutex_lock(&lock);
    struct vhandle *m = find_handle(mc), *v = find_handle(h);
    CUresult rc = m && m->multicast && v && !v->multicast ? bind_locked(mc, v) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr, size_t size,
                                    unsigned long long flags)
{
    (void)mc_offset, (void)size, (void)flags;
    pthread_mutex_lock(&lock);
    struct vhandle *m = find_handle(mc), *v = handle_at_locked(ptr);
    CUresult rc = m && m->multicast && v ? bind_locked(mc, v) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mc, CUdevice dev, size_t mc_offset, size_t size)
{
    (void)dev, (void)mc_offset, (void)size;
    pthread_mutex_lock(&lock);
    unbind_locked(mc);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* A handle mapped into a sparse array lives until that mapping is unmapped. */
EXPORT CUresult cuMemMapArrayAsync(CUarrayMapInfo *infos, unsigned count, CUstream s)
{
    (void)s;
    if (!infos || !count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++) {
        uint64_t owner = (uint64_t)(uintptr_t)infos[i].resource.array;
        if (infos[i].memOperationType == CU_MEM_OPERATION_TYPE_UNMAP) {
            unbind_locked(owner);
        } else {
            struct vhandle *v = infos[i].memHandleType == CU_MEM_HANDLE_TYPE_GENERIC
                                    ? find_handle(infos[i].memHandle.memHandle)
                                    : NULL;
            rc = v && !v->multicast ? bind_locked(owner, v) : CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo *infos, unsigned count, CUstream s)
{
    return cuMemMapArrayAsync(infos, count, s);
}

/* ---------------------------------------------------------------- legacy IPC */
struct ipc_export {
    uint32_t magic, pid;
    uint64_t bytes;
    char pad[48];
};
#define IPC_MAGIC 0x43504946u /* "FIPC" */

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    uint64_t bytes;
    if (!h || !fake_block_size(p, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_export e = {IPC_MAGIC, (uint32_t)getpid(), bytes, {0}};
    memcpy(h, &e, sizeof e);
    return CUDA_SUCCESS;
}

/* A mapping of the exporter's memory: charged to the exporter, not here. */
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    (void)flags;
    struct ipc_export e;
    memcpy(&e, &h, sizeof e);
    if (!p || e.magic != IPC_MAGIC || !e.bytes || e.pid == (uint32_t)getpid())
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: not in the exporting process */
    uint64_t key = 0;
    CUresult rc = fake_block_add(e.bytes, -1, &key, NULL);
    if (rc == CUDA_SUCCESS)
        *p = key;
    return rc;
}

EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    return cuIpcOpenMemHandle_v2(p, h, flags);
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    return fake_free(p);
}

/* ---------------------------------------------------------------- pinned host memory */
static CUresult host_alloc(void **pp, size_t bytes)
{
    if (!pp || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    void *mem = NULL;
    CUresult rc = fake_block_add(bytes, -1, &key, &mem);
    if (rc == CUDA_SUCCESS)
        *pp = mem;
    return rc;
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned flags)
{
    (void)flags;
    return host_alloc(pp, bytes);
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytes)
{
    return host_alloc(pp, bytes);
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    return fake_free((uint64_t)(uintptr_t)p);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags)
{
    (void)flags;
    return p && bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void fake_memory_forget(void)
{
    memset(default_pool, 0, sizeof default_pool);
    memset(current_pool, 0, sizeof current_pool);
    nmade = 0;
    npblocks = nhandles = nmaps = nbinds = 0;
    pthread_mutex_init(&lock, NULL);
}
