/* The table of stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync): pointer ->
 * what its free needs (bytes, device, pool). Its own table, apart from track.c's, because a
 * PyTorch-style program makes and frees one per tensor: the pointers are spread over 64 stripes
 * by their hash, each stripe an open-addressing table (backward-shift deletion, grows by
 * doubling) with its own lock on its own cache line, so threads that allocate at once rarely
 * meet, and a put or a take is one uncontended lock and a short probe. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

#define STRIPES 64 /* a power of two */

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

int vgpu_async_put(const struct vgpu_async_entry *e, struct vgpu_async_entry *old)
{
    if (!e->key)
        return -1; /* 0 marks an empty slot; the driver never returns it */
    uint64_t h = hash(e->key);
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
    s->count++;
    vgpu_spin_unlock(&s->lock);
    return 0;
}

int vgpu_async_take(uint64_t key, struct vgpu_async_entry *out)
{
    uint64_t h = hash(key);
    struct stripe *s = stripe_of(h);
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
    s->count--;
    vgpu_spin_unlock(&s->lock);
    return 0;
}

/* After fork(): the child owns no GPU memory of its parent. */
static void forget_in_child(void)
{
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
