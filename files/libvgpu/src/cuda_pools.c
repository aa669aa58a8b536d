/* Stream-ordered pools (design.md, "What each path charges"). A pool keeps freed memory: until a
 * synchronize above its release threshold (default 0), for good with threshold UINT64_MAX (what
 * PyTorch's cudaMallocAsync backend sets), until cuMemPoolTrimTo. So a pool is charged
 * max(its live allocations, its last known CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT):
 *  - an allocation the pool's charge covers costs nothing more and touches nothing shared (the
 *    fast path: the pool's live count moved atomically, no lock; then the pointer remembered in
 *    the table of stream-ordered allocations, track_async.c, without a lock either);
 *  - one that may grow the pool is admitted for the growth first, then the reserve is read
 *    back (one cuMemPoolGetAttribute) and the charge settled to what the driver holds;
 *  - a free lowers the live count only: the charge stays until the reserve is read again, which
 *    happens at cuMemPoolTrimTo, at cuMemPoolSetAttribute of the threshold, at cuMemGetInfo and
 *    before any refusal (cuda_account.c). Synchronizing calls are not hooked: they are on the hot
 *    path, and the read before a refusal gives back what they released.
 * The pool of cuMemAllocAsync is the device's current pool (cuDeviceSetMemPool, cuMemSetMemPool,
 * else the default one). Imported pools allocate nothing; pointers imported from another process
 * are the exporter's (not charged). */
#include <pthread.h>
#include <string.h>

#include "cuda_shim.h"

/* A pool's counts. live moves atomically (the fast paths do without the lock); reserved and
 * charged change under the lock only, and the fast paths read them without it: charged is
 * max(live, reserved) after every settle, so an allocation that keeps live within charged, or a
 * free while charged is the reserve, changes no charge. */
struct pool {
    CUmemoryPool h;
    int dev, destroyed, imported;
    uint64_t live, reserved, charged;
};
#define MAX_POOLS 256
static struct pool pools[MAX_POOLS];
static int npools;
static CUmemoryPool current[VGPU_MAX_DEVICES], defaults[VGPU_MAX_DEVICES];
static struct pool *current_record[VGPU_MAX_DEVICES]; /* the current pool's record, once known */
static vgpu_spin lock = VGPU_SPIN_INIT;

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* In a fork child: no pool allocation is its own. */
static void forget_in_child(void)
{
    memset(pools, 0, sizeof pools);
    npools = 0;
    memset(current, 0, sizeof current);
    memset(current_record, 0, sizeof current_record);
    vgpu_spin_init(&lock);
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}

static CUmemoryPool default_of_locked(int dev)
{
    CUdevice d;
    if (!defaults[dev] && REAL(cuDeviceGetDefaultMemPool) && REAL(cuDeviceGet)
        && REAL(cuDeviceGet)(&d, dev) == CUDA_SUCCESS)
        REAL(cuDeviceGetDefaultMemPool)(&defaults[dev], d);
    return defaults[dev];
}

/* The record of pool h (added on dev when new); NULL when the table is full. Caller holds lock. */
static struct pool *find_locked(CUmemoryPool h, int dev)
{
    for (int i = 0; i < npools; i++)
        if (pools[i].h == h)
            return &pools[i];
    if (npools == MAX_POOLS) {
        for (int i = 0; i < npools; i++) /* reuse the slot of a destroyed pool that holds nothing */
            if (pools[i].destroyed && !pools[i].charged) {
                pools[i] = (struct pool){.h = h, .dev = dev};
                return &pools[i];
            }
        return NULL;
    }
    pools[npools] = (struct pool){.h = h, .dev = dev};
    return &pools[npools++];
}

/* The pool's charge becomes max(live, reserved) (nothing for a destroyed pool that holds no
 * allocation); returns the change. Caller holds lock. */
static int64_t settle_locked(struct pool *p)
{
    uint64_t live = LOAD(p->live), target = live > p->reserved ? live : p->reserved;
    if (p->destroyed && live == 0)
        target = 0;
    int64_t delta = (int64_t)(target - p->charged);
    p->charged = target;
    return delta;
}

static void read_reserve_locked(struct pool *p)
{
    unsigned long long v;
    if (!p->destroyed && REAL(cuMemPoolGetAttribute)
        && REAL(cuMemPoolGetAttribute)(p->h, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS)
        p->reserved = v;
}

void vgpu_pools_reread(int dev)
{
    int64_t delta = 0;
    vgpu_spin_lock(&lock);
    for (int i = 0; i < npools; i++) {
        struct pool *p = &pools[i];
        if (p->dev != dev || p->imported || p->charged <= LOAD(p->live))
            continue;
        read_reserve_locked(p);
        delta += settle_locked(p);
    }
    vgpu_spin_unlock(&lock);
    vgpu_adjust(dev, delta, 0, 0);
}

/* ---- allocation: the growth admitted first, the driver's reserve read back after ---- */
struct ticket {
    struct pool *p;
    int dev;
    uint64_t size, growth;
};

/* An allocation of size from p that its charge covers: counted in live, no lock. 0 when it would
 * grow the charge (nothing changed). */
static int covered(struct pool *p, uint64_t size)
{
    if (!p || LOAD(p->destroyed) || LOAD(p->imported))
        return 0;
    if (__atomic_add_fetch(&p->live, size, __ATOMIC_RELAXED) <= LOAD(p->charged))
        return 1;
    __atomic_sub_fetch(&p->live, size, __ATOMIC_RELAXED);
    return 0;
}

/* 0: go on with the driver call; 1: not a charged pool (plain forward); -1: over the quota.
 * h NULL: dev's current pool (cuDeviceSetMemPool, cuMemSetMemPool, else its default one). */
__attribute__((noinline)) static int pool_admit_slow(CUmemoryPool h, int dev, uint64_t size, struct ticket *t)
{
    vgpu_spin_lock(&lock);
    if (!h)
        h = current[dev] ? current[dev] : default_of_locked(dev);
    struct pool *p = h ? find_locked(h, dev) : NULL;
    if (p && !current[dev] && h == defaults[dev])
        __atomic_store_n(&current_record[dev], p, __ATOMIC_RELEASE);
    if (!p || p->imported || p->destroyed) {
        vgpu_spin_unlock(&lock);
        return 1;
    }
    uint64_t live = __atomic_add_fetch(&p->live, size, __ATOMIC_RELAXED);
    uint64_t target = live > p->reserved ? live : p->reserved;
    uint64_t growth = target > p->charged ? target - p->charged : 0;
    p->charged += growth;
    *t = (struct ticket){p, p->dev, size, growth};
    vgpu_spin_unlock(&lock);
    if (growth && vgpu_adjust(t->dev, (int64_t)growth, 0, 1) != 0) {
        vgpu_spin_lock(&lock);
        __atomic_sub_fetch(&p->live, size, __ATOMIC_RELAXED);
        p->charged -= growth;
        vgpu_spin_unlock(&lock);
        return -1;
    }
    return 0;
}

/* The fast path inline in the hooks: the current pool's charge covers the allocation. */
static inline int pool_admit(CUmemoryPool h, int dev, uint64_t size, struct ticket *t)
{
    struct pool *fast = h ? NULL : __atomic_load_n(&current_record[dev], __ATOMIC_ACQUIRE);
    if (__builtin_expect(covered(fast, size), 1)) {
        *t = (struct ticket){fast, dev, size, 0};
        return 0;
    }
    return pool_admit_slow(h, dev, size, t);
}

/* After the driver's call: a failure or a growth settles the pool's charge to what the driver holds. */
__attribute__((noinline)) static void pool_settle(struct ticket *t, CUresult rc)
{
    struct pool *p = t->p;
    vgpu_spin_lock(&lock);
    if (rc != CUDA_SUCCESS)
        __atomic_sub_fetch(&p->live, t->size, __ATOMIC_RELAXED);
    else
        read_reserve_locked(p);
    int64_t delta = settle_locked(p);
    vgpu_spin_unlock(&lock);
    vgpu_adjust(t->dev, delta, 0, 0); /* what the driver holds, whatever its rounding */
}

/* A success the charge covered changes nothing but the table: the charge is max(live, reserve)
 * after every settle, so it was the reserve, which covers the new live count too. */
static inline void pool_done(struct ticket *t, CUresult rc, CUdeviceptr ptr)
{
    if (__builtin_expect(rc != CUDA_SUCCESS || t->growth, 0))
        pool_settle(t, rc);
    if (rc == CUDA_SUCCESS) {
        struct pool *p = t->p;
        struct vgpu_async_entry e = {.key = ptr, .bytes = t->size, .pool = (uint64_t)(uintptr_t)p->h, .dev = t->dev,
                                     .record = (uint32_t)(p - pools) + 1},
                                old;
        if (__builtin_expect(vgpu_async_put(&e, &old) == 1, 0)) /* freed unseen (a graph's free node) */
            vgpu_pool_freed(&old);
    }
}

/* live less bytes, never below 0. */
static void fewer_live(struct pool *p, uint64_t bytes)
{
    uint64_t live = LOAD(p->live);
    while (!__atomic_compare_exchange_n(&p->live, &live, live > bytes ? live - bytes : 0, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
}

/* A pool allocation freed: its memory stays in the pool. While the pool's charge is its reserve
 * (the usual case), only live moves. */
void vgpu_pool_freed(const struct vgpu_async_entry *e)
{
    CUmemoryPool h = (CUmemoryPool)(uintptr_t)e->pool;
    struct pool *p = e->record && e->record <= MAX_POOLS ? &pools[e->record - 1] : NULL;
    if (p && LOAD(p->h) == h && !LOAD(p->destroyed) && LOAD(p->charged) <= LOAD(p->reserved)) {
        fewer_live(p, e->bytes);
        return;
    }
    vgpu_spin_lock(&lock);
    p = find_locked(h, e->dev);
    int64_t delta = 0;
    if (p) {
        fewer_live(p, e->bytes);
        delta = settle_locked(p);
    }
    vgpu_spin_unlock(&lock);
    vgpu_adjust(e->dev, delta, 0, 0);
}

/* ALLOC from pool POOL (an expression) with CALL, or a plain charge when the pool is unknown. */
#define POOL_ALLOC_BODY(POOL, CALL)                                                                                   \
    do {                                                                                                              \
        struct ticket t;                                                                                              \
        int a = pool_admit(POOL, dev, size, &t);                                                                      \
        if (a < 0)                                                                                                    \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        if (a > 0)                                                                                                    \
            ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, CALL);                                                           \
        CUresult rc = CALL;                                                                                           \
        pool_done(&t, rc, rc == CUDA_SUCCESS ? *dptr : 0);                                                            \
        return rc;                                                                                                    \
    } while (0)

/* Under stream capture the allocation is a graph's (cuda_graphs.c): charged as one allocation.
 * The device is the only one the process sees without asking the driver (vgpu_sole_device): a
 * call without a current context then fails in the driver and gives its admission back, and a
 * refusal (or a pool libvgpu does not charge) asks first whether there is a context at all, so
 * such a call gets the driver's error. */
#define ASYNC_ALLOC(NAME, IS_CAPTURING)                                                                               \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUstream stream)                                        \
    {                                                                                                                 \
        HOOK_ENTER(NAME, dptr, size, stream);                                                                         \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || vgpu_cuda.exiting || vgpu_sole_device(&dev) != 0)                                   \
            return REAL(NAME)(dptr, size, stream);                                                                    \
        if (vgpu_stream_captured(REAL(IS_CAPTURING), stream))                                                         \
            ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(NAME)(dptr, size, stream));                                \
        struct ticket t;                                                                                              \
        int a = pool_admit(NULL, dev, size, &t);                                                                      \
        if (a != 0 && vgpu_current_device(&dev) != 0) /* no context: the driver's error */                           \
            return REAL(NAME)(dptr, size, stream);                                                                    \
        if (a < 0)                                                                                                    \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        if (a > 0)                                                                                                    \
            ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(NAME)(dptr, size, stream));                                \
        CUresult rc = REAL(NAME)(dptr, size, stream);                                                                 \
        pool_done(&t, rc, rc == CUDA_SUCCESS ? *dptr : 0);                                                            \
        return rc;                                                                                                    \
    }
ASYNC_ALLOC(cuMemAllocAsync, cuStreamIsCapturing)
ASYNC_ALLOC(cuMemAllocAsync_ptsz, cuStreamIsCapturing_ptsz)

/* A pool's memory is on the pool's device; a pool libvgpu has not seen made is the default pool
 * of one of the devices, or charged to the current device. */
static int pool_device(CUmemoryPool pool, int fallback)
{
    vgpu_spin_lock(&lock);
    int dev = fallback;
    struct pool *known = NULL;
    for (int i = 0; i < npools && !known; i++)
        if (pools[i].h == pool)
            known = &pools[i];
    if (known)
        dev = known->dev;
    else
        for (int d = 0; d < VGPU_MAX_DEVICES; d++)
            if (default_of_locked(d) == pool) {
                dev = d;
                break;
            }
    vgpu_spin_unlock(&lock);
    return dev;
}

#define POOL_ALLOC(NAME, IS_CAPTURING)                                                                                \
    VGPU_EXPORT CUresult NAME(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)                     \
    {                                                                                                                 \
        HOOK_ENTER(NAME, dptr, size, pool, stream);                                                                   \
        int dev;                                                                                                      \
        if (!dptr || size == 0 || vgpu_cuda.exiting || vgpu_current_device(&dev) != 0)                                \
            return REAL(NAME)(dptr, size, pool, stream);                                                              \
        dev = pool_device(pool, dev);                                                                                 \
        if (vgpu_stream_captured(REAL(IS_CAPTURING), stream))                                                         \
            ALLOC_BODY(VGPU_K_PTR, *dptr, size, dev, REAL(NAME)(dptr, size, pool, stream));                           \
        POOL_ALLOC_BODY(pool, REAL(NAME)(dptr, size, pool, stream));                                                  \
    }
POOL_ALLOC(cuMemAllocFromPoolAsync, cuStreamIsCapturing)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, cuStreamIsCapturing_ptsz)

/* ---- the pools themselves ---- */
VGPU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    HOOK_ENTER(cuMemPoolCreate, pool, props);
    CUresult rc = REAL(cuMemPoolCreate)(pool, props);
    if (rc == CUDA_SUCCESS && pool && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
        && props->location.id >= 0 && props->location.id < VGPU_MAX_DEVICES) {
        vgpu_spin_lock(&lock);
        struct pool *p = find_locked(*pool, props->location.id);
        if (p) /* a new pool at an address the driver reused */
            *p = (struct pool){.h = *pool, .dev = props->location.id, .charged = p->charged, .live = LOAD(p->live)};
        vgpu_spin_unlock(&lock);
    }
    return rc;
}

/* With allocations outstanding the driver frees the pool's memory once they are freed. */
VGPU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    HOOK_ENTER(cuMemPoolDestroy, pool);
    CUresult rc = REAL(cuMemPoolDestroy)(pool);
    if (rc != CUDA_SUCCESS)
        return rc;
    vgpu_spin_lock(&lock);
    int64_t delta = 0;
    int dev = 0;
    for (int i = 0; i < npools; i++)
        if (pools[i].h == pool && !pools[i].destroyed) {
            pools[i].destroyed = 1;
            dev = pools[i].dev;
            delta = settle_locked(&pools[i]);
            pools[i].h = LOAD(pools[i].live) ? pools[i].h : NULL;
        }
    for (int d = 0; d < VGPU_MAX_DEVICES; d++)
        if (current[d] == pool) {
            current[d] = NULL;
            __atomic_store_n(&current_record[d], NULL, __ATOMIC_RELEASE);
        }
    vgpu_spin_unlock(&lock);
    vgpu_adjust(dev, delta, 0, 0);
    return rc;
}

static void reread_pool(CUmemoryPool pool)
{
    vgpu_spin_lock(&lock);
    int64_t delta = 0;
    int dev = 0;
    for (int i = 0; i < npools; i++)
        if (pools[i].h == pool && !pools[i].imported) {
            read_reserve_locked(&pools[i]);
            delta = settle_locked(&pools[i]);
            dev = pools[i].dev;
        }
    vgpu_spin_unlock(&lock);
    vgpu_adjust(dev, delta, 0, 0);
}

VGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    HOOK_ENTER(cuMemPoolTrimTo, pool, keep);
    CUresult rc = REAL(cuMemPoolTrimTo)(pool, keep);
    if (rc == CUDA_SUCCESS && !vgpu_cuda.exiting)
        reread_pool(pool);
    return rc;
}

VGPU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value)
{
    HOOK_ENTER(cuMemPoolSetAttribute, pool, attr, value);
    CUresult rc = REAL(cuMemPoolSetAttribute)(pool, attr, value);
    if (rc == CUDA_SUCCESS && attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && !vgpu_cuda.exiting)
        reread_pool(pool);
    return rc;
}

static void set_current(int dev, CUmemoryPool pool)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return;
    vgpu_spin_lock(&lock);
    current[dev] = pool;
    __atomic_store_n(&current_record[dev], find_locked(pool, dev), __ATOMIC_RELEASE);
    vgpu_spin_unlock(&lock);
}

VGPU_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    HOOK_ENTER(cuDeviceSetMemPool, dev, pool);
    CUresult rc = REAL(cuDeviceSetMemPool)(dev, pool);
    if (rc == CUDA_SUCCESS)
        set_current(dev, pool);
    return rc;
}

VGPU_EXPORT CUresult cuMemSetMemPool(CUmemLocation *location, int type, CUmemoryPool pool)
{
    HOOK_ENTER(cuMemSetMemPool, location, type, pool);
    CUresult rc = REAL(cuMemSetMemPool)(location, type, pool);
    if (rc == CUDA_SUCCESS && location && location->type == CU_MEM_LOCATION_TYPE_DEVICE
        && type == CU_MEM_ALLOCATION_TYPE_PINNED)
        set_current(location->id, pool);
    return rc;
}

/* Imports are the exporter's memory: an imported pool allocates nothing here, an imported
 * pointer is not charged again. Hooked so that the rule is explicit (and tested). */
VGPU_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle, int type,
                                                        unsigned long long flags)
{
    HOOK_ENTER(cuMemPoolImportFromShareableHandle, pool, handle, type, flags);
    CUresult rc = REAL(cuMemPoolImportFromShareableHandle)(pool, handle, type, flags);
    if (rc == CUDA_SUCCESS && pool) {
        vgpu_spin_lock(&lock);
        struct pool *p = find_locked(*pool, 0);
        if (p)
            p->imported = 1;
        vgpu_spin_unlock(&lock);
    }
    return rc;
}

VGPU_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool, void *data)
{
    HOOK_ENTER(cuMemPoolImportPointer, dptr, pool, data);
    return REAL(cuMemPoolImportPointer)(dptr, pool, data);
}
