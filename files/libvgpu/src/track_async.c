/* The table of stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync): pointer ->
 * what its free needs (bytes, device, pool). Its own table, apart from track.c's, because a
 * PyTorch-style program makes and frees one per tensor. Two layers:
 *  - the front: a direct-mapped array of FRONT slots without a lock. A slot's key is its state
 *    (0 empty, BUSY being written, else the pointer): a put claims an empty slot with one
 *    compare-and-swap, writes the record and publishes the key; a take that finds its key reads
 *    the record and clears the key with one compare-and-swap. So the common pair costs two atomic
 *    instructions and a few loads, and threads meet only on the same slot.
 *  - behind it, for a pointer whose slot is taken: 64 stripes chosen by the hash, each an
 *    open-addressing table (backward-shift deletion, grows by doubling) with its own lock on its
 *    own cache line; a take skips a stripe that holds nothing without locking it.
 * A pointer the driver hands out again while libvgpu still holds it (its free was not seen: a
 * graph's free node) replaces the old record when it lands where the old one is (returned as
 * stale); one left behind in a stripe while the new one is in the front stays there, charged,
 * until its address comes back to that stripe (an over-charge, never an under-charge). Two frees
 * of one pointer at once (a program's bug) may both succeed here as they may in the driver. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

#define STRIPES 64   /* a power of two */
#define FRONT 8192   /* a power of two: 256 KiB, touched as used */
#define BUSY 1ULL    /* a front slot being written (a pointer is never 1) */

static struct vgpu_async_entry front[FRONT];

struct stripe {
    vgpu_spin lock;
    uint32_t count, cap; /* cap: 0 or a power of two */
    struct vgpu_async_entry *slots;
} __attribute__((aligned(64)));

static struct stripe stripes[STRIPES];

/* One multiply and a fold: the top bits pick the stripe, the low bits the home slot. */
static inline uint64_t hash(uint64_t key)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 32);
}

static inline struct stripe *stripe_of(uint64_t h)
{
    return &stripes[h >> (64 - 6)];
}

static void insert_raw(struct vgpu_async_entry *t, uint32_t cap, const struct vgpu_async_entry *e)
{
    uint32_t i = (uint32_t)hash(e->key) & (cap - 1);
    while (t[i].key)
        i = (i + 1) & (cap - 1);
    t[i] = *e;
}

/* Caller holds s->lock. */
static int grow_locked(struct stripe *s)
{
    uint32_t ncap = s->cap ? s->cap * 2 : 16;
    struct vgpu_async_entry *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->slots[i].key)
            insert_raw(nt, ncap, &s->slots[i]);
    free(s->slots);
    s->slots = nt;
    s->cap = ncap;
    return 0;
}

/* Index of key in s, or -1. Caller holds s->lock. */
static inline long find_locked(const struct stripe *s, uint64_t h, uint64_t key)
{
    if (!s->cap)
        return -1;
    uint32_t i = (uint32_t)h & (s->cap - 1);
    while (s->slots[i].key && s->slots[i].key != key)
        i = (i + 1) & (s->cap - 1);
    return s->slots[i].key ? (long)i : -1;
}

__attribute__((noinline)) static int stripe_put(const struct vgpu_async_entry *e, uint64_t h, struct vgpu_async_entry *old)
{
    struct stripe *s = stripe_of(h);
    vgpu_spin_lock(&s->lock);
    /* the driver reused an address whose free libvgpu did not see (a graph's free node) */
    long at = find_locked(s, h, e->key);
    if (at >= 0) {
        *old = s->slots[at];
        s->slots[at] = *e;
        vgpu_spin_unlock(&s->lock);
        return 1;
    }
    if ((s->count + 1) * 4 > s->cap * 3 && grow_locked(s) != 0) {
        vgpu_spin_unlock(&s->lock);
        return -1;
    }
    insert_raw(s->slots, s->cap, e);
    __atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELEASE);
    vgpu_spin_unlock(&s->lock);
    return 0;
}

__attribute__((noinline)) static int stripe_take(uint64_t key, uint64_t h, struct vgpu_async_entry *out)
{
    struct stripe *s = stripe_of(h);
    if (!__atomic_load_n(&s->count, __ATOMIC_ACQUIRE))
        return -1; /* nothing there: no lock */
    vgpu_spin_lock(&s->lock);
    long at = find_locked(s, h, key);
    if (at < 0) {
        vgpu_spin_unlock(&s->lock);
        return -1;
    }
    *out = s->slots[at];
    /* backward-shift deletion: probe chains stay whole without tombstones */
    uint32_t mask = s->cap - 1, hole = (uint32_t)at, j = hole;
    for (;;) {
        j = (j + 1) & mask;
        if (!s->slots[j].key)
            break;
        uint32_t home = (uint32_t)hash(s->slots[j].key) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            s->slots[hole] = s->slots[j];
            hole = j;
        }
    }
    s->slots[hole].key = 0;
    __atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELEASE);
    vgpu_spin_unlock(&s->lock);
    return 0;
}

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* The record of a front slot whose key we hold (or saw published), field by field: a slot being
 * rewritten by another thread is only ever read by a double free. */
static inline void read_slot(struct vgpu_async_entry *f, uint64_t key, struct vgpu_async_entry *out)
{
    *out = (struct vgpu_async_entry){.key = key, .bytes = LD(f->bytes), .pool = LD(f->pool), .dev = LD(f->dev),
                                     .record = LD(f->record)};
}

static inline void write_slot(struct vgpu_async_entry *f, const struct vgpu_async_entry *e)
{
    ST(f->bytes, e->bytes);
    ST(f->pool, e->pool);
    ST(f->dev, e->dev);
    ST(f->record, e->record);
    __atomic_store_n(&f->key, e->key, __ATOMIC_RELEASE); /* published */
}

int vgpu_async_put(const struct vgpu_async_entry *e, struct vgpu_async_entry *old)
{
    if (e->key <= BUSY)
        return -1; /* 0 and BUSY are slot states; the driver never returns either */
    uint64_t h = hash(e->key);
    struct vgpu_async_entry *f = &front[h & (FRONT - 1)];
    uint64_t seen = __atomic_load_n(&f->key, __ATOMIC_ACQUIRE);
    if (seen == e->key) { /* a stale record of this pointer: replaced */
        read_slot(f, seen, old);
        if (__atomic_compare_exchange_n(&f->key, &seen, BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            write_slot(f, e);
            return 1;
        }
    } else if (seen == 0 && __atomic_compare_exchange_n(&f->key, &seen, BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        write_slot(f, e);
        return 0;
    }
    return stripe_put(e, h, old);
}

int vgpu_async_take(uint64_t key, struct vgpu_async_entry *out)
{
    if (key <= BUSY)
        return -1;
    uint64_t h = hash(key);
    struct vgpu_async_entry *f = &front[h & (FRONT - 1)];
    uint64_t seen = __atomic_load_n(&f->key, __ATOMIC_ACQUIRE);
    if (seen == key) {
        read_slot(f, key, out);
        if (__atomic_compare_exchange_n(&f->key, &seen, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return 0;
    }
    return stripe_take(key, h, out);
}

/* After fork(): the child owns no GPU memory of its parent. */
static void forget_in_child(void)
{
    memset(front, 0, sizeof front);
    for (int i = 0; i < STRIPES; i++) {
        vgpu_spin_init(&stripes[i].lock);
        if (stripes[i].slots)
            memset(stripes[i].slots, 0, stripes[i].cap * sizeof *stripes[i].slots);
        stripes[i].count = 0;
    }
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}
