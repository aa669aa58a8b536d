/* Process-local table of the allocations we charged: (kind, key) -> (bytes, device).
 * Open addressing with backward-shift deletion, one mutex (allocation calls are not hot enough
 * to need more), grows by doubling. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
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

int vgpu_track_put(int kind, uint64_t key, uint64_t bytes, int dev, uint64_t *old_bytes, int *old_dev)
{
    struct vgpu_track_entry e = {key, bytes, dev, kind};
    pthread_mutex_lock(&lock);
    if ((count + 1) * 4 > cap * 3 && grow() != 0) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    /* replace a stale entry with the same key (the driver reused an address we missed freeing) */
    size_t i = hash(kind, key) & (cap - 1);
    while (table[i].kind) {
        if (table[i].kind == kind && table[i].key == key) {
            *old_bytes = table[i].bytes;
            *old_dev = table[i].dev;
            table[i] = e;
            pthread_mutex_unlock(&lock);
            return 1;
        }
        i = (i + 1) & (cap - 1);
    }
    table[i] = e;
    count++;
    pthread_mutex_unlock(&lock);
    return 0;
}

int vgpu_track_take(int kind, uint64_t key, uint64_t *bytes, int *dev)
{
    pthread_mutex_lock(&lock);
    if (!cap) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    size_t i = hash(kind, key) & (cap - 1);
    while (table[i].kind && !(table[i].kind == kind && table[i].key == key))
        i = (i + 1) & (cap - 1);
    if (!table[i].kind) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    *bytes = table[i].bytes;
    *dev = table[i].dev;
    /* backward-shift deletion keeps probe chains intact without tombstones */
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
    pthread_mutex_unlock(&lock);
    return 0;
}

/* After fork(): the child owns no GPU memory of its parent. */
void vgpu_track_reset(void)
{
    pthread_mutex_init(&lock, NULL);
    if (table)
        memset(table, 0, cap * sizeof *table);
    count = 0;
}
