/* Process-local table of what this process charged: (kind, key) -> entry (bytes, device and the
 * kind's own fields). Open addressing with backward-shift deletion, one lock (vgpu_spin: every
 * allocation and free takes it; stream-ordered allocations are track_async.c's), grows by doubling. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

static vgpu_spin lock = VGPU_SPIN_INIT;
static struct vgpu_track_entry *table;
static size_t cap, count;

static size_t hash(int kind, uint64_t key)
{
    uint64_t h = key ^ ((uint64_t)kind << 56);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h;
}

static void insert_raw(struct vgpu_track_entry *t, size_t n, const struct vgpu_track_entry *e)
{
    size_t i = hash(e->kind, e->key) & (n - 1);
    while (t[i].kind)
        i = (i + 1) & (n - 1);
    t[i] = *e;
}

static int grow(void)
{
    size_t ncap = cap ? cap * 2 : 1024;
    struct vgpu_track_entry *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    for (size_t i = 0; i < cap; i++)
        if (table[i].kind)
            insert_raw(nt, ncap, &table[i]);
    free(table);
    table = nt;
    cap = ncap;
    return 0;
}

/* Index of (kind, key), or -1. Caller holds lock. */
static long find_locked(int kind, uint64_t key)
{
    if (!cap)
        return -1;
    size_t i = hash(kind, key) & (cap - 1);
    while (table[i].kind && !(table[i].kind == kind && table[i].key == key))
        i = (i + 1) & (cap - 1);
    return table[i].kind ? (long)i : -1;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. Caller holds lock. */
static void remove_locked(size_t i)
{
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (!table[j].kind)
            break;
        size_t home = hash(table[j].kind, table[j].key) & (cap - 1);
        if (((j - home) & (cap - 1)) >= ((j - hole) & (cap - 1))) {
            table[hole] = table[j];
            hole = j;
        }
    }
    memset(&table[hole], 0, sizeof table[hole]);
    count--;
}

int vgpu_track_put_entry(const struct vgpu_track_entry *e, struct vgpu_track_entry *old)
{
    vgpu_spin_lock(&lock);
    if ((count + 1) * 4 > cap * 3 && grow() != 0) {
        vgpu_spin_unlock(&lock);
        return -1;
    }
    /* replace a stale entry with the same key (the driver reused an address we missed freeing) */
    long at = find_locked(e->kind, e->key);
    if (at >= 0) {
        *old = table[at];
        table[at] = *e;
        vgpu_spin_unlock(&lock);
        return 1;
    }
    insert_raw(table, cap, e);
    count++;
    vgpu_spin_unlock(&lock);
    return 0;
}

int vgpu_track_put(int kind, uint64_t key, uint64_t bytes, int dev, uint64_t *old_bytes, int *old_dev)
{
    struct vgpu_track_entry e = {.key = key, .bytes = bytes, .dev = dev, .kind = kind}, old;
    int rc = vgpu_track_put_entry(&e, &old);
    if (rc == 1) {
        *old_bytes = old.bytes;
        *old_dev = old.dev;
    }
    return rc;
}

int vgpu_track_take_entry(int kind, uint64_t key, struct vgpu_track_entry *out)
{
    vgpu_spin_lock(&lock);
    long at = find_locked(kind, key);
    if (at < 0) {
        vgpu_spin_unlock(&lock);
        return -1;
    }
    *out = table[at];
    remove_locked((size_t)at);
    vgpu_spin_unlock(&lock);
    return 0;
}

int vgpu_track_take(int kind, uint64_t key, uint64_t *bytes, int *dev)
{
    struct vgpu_track_entry e;
    if (vgpu_track_take_entry(kind, key, &e) != 0)
        return -1;
    *bytes = e.bytes;
    *dev = e.dev;
    return 0;
}

int vgpu_track_with(int kind, uint64_t key, int (*fn)(struct vgpu_track_entry *, void *), void *arg,
                    struct vgpu_track_entry *out)
{
    vgpu_spin_lock(&lock);
    long at = find_locked(kind, key);
    if (at < 0) {
        vgpu_spin_unlock(&lock);
        return -1;
    }
    int rc = fn(&table[at], arg);
    if (out)
        *out = table[at];
    if (rc == 1)
        remove_locked((size_t)at);
    vgpu_spin_unlock(&lock);
    return rc;
}

void vgpu_track_drain(int kind, int (*pick)(const struct vgpu_track_entry *, void *), void *arg,
                      void (*done)(const struct vgpu_track_entry *, void *))
{
    for (;;) {
        struct vgpu_track_entry e;
        int found = 0;
        vgpu_spin_lock(&lock);
        for (size_t i = 0; i < cap && !found; i++)
            if (table[i].kind == kind && pick(&table[i], arg)) {
                e = table[i];
                remove_locked(i);
                found = 1;
            }
        vgpu_spin_unlock(&lock);
        if (!found)
            return;
        done(&e, arg);
    }
}

int vgpu_track_find(int kind, int (*pick)(const struct vgpu_track_entry *, void *), void *arg,
                    struct vgpu_track_entry *out)
{
    int rc = -1;
    vgpu_spin_lock(&lock);
    for (size_t i = 0; i < cap && rc != 0; i++)
        if (table[i].kind == kind && pick(&table[i], arg)) {
            *out = table[i];
            rc = 0;
        }
    vgpu_spin_unlock(&lock);
    return rc;
}

/* After fork(): the child owns no GPU memory of its parent. */
static void forget_in_child(void)
{
    vgpu_spin_init(&lock);
    if (table)
        memset(table, 0, cap * sizeof *table);
    count = 0;
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, forget_in_child);
}
