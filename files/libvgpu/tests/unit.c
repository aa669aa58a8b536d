/* Unit tests of the parts that need no driver: the region layout against
 * docs/region-format.md, size and limit parsing, and the allocation table. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "region.h"
#include "vgpu.h"

static int failures, checks;
#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        checks++;                                                                                                     \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            printf("  unit FAIL %s:%d: ", __FILE__, __LINE__);                                                        \
            printf(__VA_ARGS__);                                                                                      \
            printf("\n");                                                                                             \
        }                                                                                                             \
    } while (0)
#define OFF(type, field, want) CHECK(offsetof(type, field) == (want), #type "." #field " at %zu, doc says %d", offsetof(type, field), want)

static void layout(void)
{
    OFF(struct vgpu_region_header, magic, 0);
    OFF(struct vgpu_region_header, version, 4);
    OFF(struct vgpu_region_header, header_size, 8);
    OFF(struct vgpu_region_header, device_size, 12);
    OFF(struct vgpu_region_header, max_devices, 16);
    OFF(struct vgpu_region_header, slot_size, 20);
    OFF(struct vgpu_region_header, max_slots, 24);
    OFF(struct vgpu_region_header, state, 28);
    OFF(struct vgpu_region_header, file_size, 32);
    OFF(struct vgpu_region_header, seq, 40);
    OFF(struct vgpu_region_header, created_ns, 48);
    OFF(struct vgpu_region_header, flags, 56);
    OFF(struct vgpu_region_header, device_count, 60);
    OFF(struct vgpu_region_header, ctx_reserve_bytes, 64);
    OFF(struct vgpu_region_header, updated_ns, 72);
    OFF(struct vgpu_region_header, lock_owner_pid, 80);
    OFF(struct vgpu_region_header, reset_count, 84);
    OFF(struct vgpu_region_header, slot_high, 88);
    OFF(struct vgpu_region_header, restored_count, 92);
    OFF(struct vgpu_region_header, lock, 128);
    OFF(struct vgpu_region_header, cgroup, 192);
    OFF(struct vgpu_region_header, exits, 448);
    OFF(struct vgpu_region_exit, pid, 0);
    OFF(struct vgpu_region_exit, dev, 4);
    OFF(struct vgpu_region_exit, start_time, 8);
    OFF(struct vgpu_region_exit, bytes, 16);
    OFF(struct vgpu_region_header, devices, 1024);
    OFF(struct vgpu_region_header, truth, 3072);
    OFF(struct vgpu_region_truth, nvml_bytes, 0);
    OFF(struct vgpu_region_truth, excess_bytes, 8);
    OFF(struct vgpu_region_truth, admitted_bytes, 16);
    OFF(struct vgpu_region_truth, checked_ns, 24);
    OFF(struct vgpu_region_device, limit_bytes, 0);
    OFF(struct vgpu_region_device, used_bytes, 8);
    OFF(struct vgpu_region_device, ctx_bytes, 16);
    OFF(struct vgpu_region_device, peak_bytes, 24);
    OFF(struct vgpu_region_device, live_buffers, 32);
    OFF(struct vgpu_region_device, peak_buffers, 40);
    OFF(struct vgpu_region_device, alloc_count, 48);
    OFF(struct vgpu_region_device, free_count, 56);
    OFF(struct vgpu_region_device, bytes_allocated, 64);
    OFF(struct vgpu_region_device, bytes_freed, 72);
    OFF(struct vgpu_region_device, reclaimed_buffers, 80);
    OFF(struct vgpu_region_device, reclaimed_bytes, 88);
    OFF(struct vgpu_region_device, uuid, 96);
    OFF(struct vgpu_region_device, uuid_valid, 112);
    OFF(struct vgpu_region_device, oom_count, 116);
    OFF(struct vgpu_region_slot, pid, 0);
    OFF(struct vgpu_region_slot, state, 4);
    OFF(struct vgpu_region_slot, start_time, 8);
    OFF(struct vgpu_region_slot, attach_ns, 16);
    OFF(struct vgpu_region_slot, launches, 24);
    OFF(struct vgpu_region_slot, gpu_time_ns, 32);
    OFF(struct vgpu_region_slot, comm, 40);
    OFF(struct vgpu_region_slot, devices, 64);
    OFF(struct vgpu_region_slot, nvml_bytes, 576);
    OFF(struct vgpu_region_slot, nvml_ns, 704);
    OFF(struct vgpu_region_slot, heir_of_pid, 712);
    OFF(struct vgpu_region_slot, heir_of_start, 720);
    OFF(struct vgpu_region_slot, pending_bytes, 728);
    OFF(struct vgpu_slot_device, used_bytes, 0);
    OFF(struct vgpu_slot_device, ctx_bytes, 8);
    OFF(struct vgpu_slot_device, peak_bytes, 16);
    OFF(struct vgpu_slot_device, buffers, 24);
    OFF(struct vgpu_region, slots, 4096);
    CHECK(sizeof(struct vgpu_region) == 1052672, "region is %zu bytes", sizeof(struct vgpu_region));
}

/* The size grammar's conformance vectors, the same file the collection's and the components' Python
 * tests read (contract/sizes.def): ACCEPT("text", MiB) and REFUSE("text", reason). */
static const struct size_vector {
    const char *text;
    int accepted;
    unsigned long long mib;
} size_vectors[] = {
#define ACCEPT(text, mib) {text, 1, mib##ULL},
#define REFUSE(text, reason) {text, 0, 0},
#include "../../../contract/sizes.def"
#undef ACCEPT
#undef REFUSE
};

static void sizes(void)
{
    uint64_t b = 0;
    size_t n = sizeof size_vectors / sizeof size_vectors[0];
    CHECK(n > 50, "contract/sizes.def has %zu vectors", n);
    for (size_t i = 0; i < n; i++) {
        const struct size_vector *v = &size_vectors[i];
        b = 0;
        int rc = vgpu_parse_size(v->text, &b);
        if (v->accepted)
            CHECK(rc == 0 && b == v->mib << 20, "size \"%s\" is %llu MiB (rc %d, %llu bytes)", v->text, v->mib, rc,
                  (unsigned long long)b);
        else
            CHECK(rc != 0, "size \"%s\" is refused (read as %llu bytes)", v->text, (unsigned long long)b);
    }
    uint64_t lim[VGPU_MAX_DEVICES];
    char err[400];
    CHECK(vgpu_parse_limits("0MiB", lim, err, sizeof err) != 0 && strstr(err, "0MiB"), "a zero quota: %s", err);
    CHECK(vgpu_parse_limits("0:0,1:1GiB", lim, err, sizeof err) != 0 && strstr(err, "0:0"), "a zero item: %s", err);
    CHECK(vgpu_parse_limits("0: 3 gib", lim, err, sizeof err) == 0 && lim[0] == 3ULL << 30, "blanks, case: %s", err);
    CHECK(vgpu_parse_limits("0:3000MiB,1:2GiB", lim, err, sizeof err) == 0 && lim[0] == 3000ULL << 20
              && lim[1] == 2ULL << 30 && lim[2] == 0,
          "per-device limits");
    CHECK(vgpu_parse_limits("3000MiB", lim, err, sizeof err) == 0 && lim[0] == lim[15], "one limit for all");
    CHECK(vgpu_parse_limits("0:3000MiB,0:1GiB", lim, err, sizeof err) != 0 && strstr(err, "twice"),
          "duplicate device: %s", err);
    CHECK(vgpu_parse_limits("16:1GiB", lim, err, sizeof err) != 0 && strstr(err, "16:1GiB"), "device 16: %s", err);
    CHECK(vgpu_parse_limits("a:1GiB", lim, err, sizeof err) != 0, "bad index");
    CHECK(vgpu_parse_limits("0:1GB", lim, err, sizeof err) != 0 && strstr(err, "0:1GB"), "names bad item: %s", err);
}

static int drop_ref(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->refs--;
    return !e->refs && !e->maps;
}

static int drop_map(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->maps--;
    return !e->refs && !e->maps;
}

static int owned(const struct vgpu_track_entry *e, void *ctx)
{
    return e->aux == *(uint64_t *)ctx;
}

static uint64_t drained;
static void add_bytes(const struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    drained += e->bytes;
}

static void table(void)
{
    uint64_t bytes, ob;
    int dev, od;
    for (uint64_t k = 1; k <= 5000; k++)
        CHECK(vgpu_track_put(VGPU_K_PTR, k * 4096, k, 0, &ob, &od) == 0, "put %llu", (unsigned long long)k);
    CHECK(vgpu_track_put(VGPU_K_HANDLE, 4096, 7, 1, &ob, &od) == 0, "same key, other kind");
    CHECK(vgpu_track_put(VGPU_K_PTR, 4096, 9, 0, &ob, &od) == 1 && ob == 1, "stale entry replaced");
    for (uint64_t k = 2; k <= 5000; k += 2)
        CHECK(vgpu_track_take(VGPU_K_PTR, k * 4096, &bytes, &dev) == 0 && bytes == k, "take %llu",
              (unsigned long long)k);
    for (uint64_t k = 3; k <= 5000; k += 2)
        CHECK(vgpu_track_take(VGPU_K_PTR, k * 4096, &bytes, &dev) == 0 && bytes == k, "take odd %llu",
              (unsigned long long)k);
    CHECK(vgpu_track_take(VGPU_K_PTR, 2 * 4096, &bytes, &dev) != 0, "taken twice");
    CHECK(vgpu_track_take(VGPU_K_HANDLE, 4096, &bytes, &dev) == 0 && bytes == 7 && dev == 1, "handle kept");

    /* a handle's references and mappings: it goes when both are gone */
    struct vgpu_track_entry h = {.key = 77, .bytes = 5, .kind = VGPU_K_HANDLE, .refs = 1, .maps = 1}, out;
    CHECK(vgpu_track_put_entry(&h, &out) == 0, "handle put");
    CHECK(vgpu_track_with(VGPU_K_HANDLE, 77, drop_ref, NULL, &out) == 0 && out.refs == 0 && out.maps == 1,
          "released while mapped: kept");
    CHECK(vgpu_track_with(VGPU_K_HANDLE, 77, drop_map, NULL, &out) == 1 && out.bytes == 5, "last unmap: taken out");
    CHECK(vgpu_track_with(VGPU_K_HANDLE, 77, drop_map, NULL, &out) == -1, "gone");
    /* everything a context owns, drained */
    for (uint64_t k = 1; k <= 50; k++) {
        struct vgpu_track_entry m = {.key = k, .bytes = k, .aux = k % 2 ? 0xc1 : 0xc2, .kind = VGPU_K_MODULE};
        vgpu_track_put_entry(&m, &out);
    }
    uint64_t ctx = 0xc1;
    CHECK(vgpu_track_find(VGPU_K_MODULE, owned, &ctx, &out) == 0 && out.aux == 0xc1, "find by owner");
    vgpu_track_drain(VGPU_K_MODULE, owned, &ctx, add_bytes);
    CHECK(drained == 625, "drained the 25 odd modules: %llu bytes", (unsigned long long)drained);
    CHECK(vgpu_track_find(VGPU_K_MODULE, owned, &ctx, &out) == -1, "none of 0xc1 left");
    CHECK(vgpu_track_take_entry(VGPU_K_MODULE, 2, &out) == 0 && out.aux == 0xc2, "the others stay");
}

/* The table of stream-ordered allocations: every key comes back once with what was put, whether
 * it sits in the lock-free front or in a stripe behind it. Keys as a pool hands them out: 2 MiB
 * apart (many share a front slot), and a stale key (freed unseen) replaced with its old record. */
static void async_table(void)
{
    struct vgpu_async_entry e, out;
    const uint64_t base = 0x7f0000000000ULL;
    for (uint64_t k = 1; k <= 20000; k++) {
        e = (struct vgpu_async_entry){.key = base + (k << 21), .bytes = k, .pool = 0xb0, .dev = (int32_t)(k % 3),
                                      .record = 1};
        CHECK(vgpu_async_put(&e, &out) == 0, "async put %llu", (unsigned long long)k);
    }
    e = (struct vgpu_async_entry){.key = base + (7ULL << 21), .bytes = 70, .pool = 0xb1, .record = 2};
    CHECK(vgpu_async_put(&e, &out) == 1 && out.bytes == 7 && out.pool == 0xb0, "stale async entry replaced");
    e.key = 0;
    CHECK(vgpu_async_put(&e, &out) == -1, "key 0 refused");
    for (uint64_t k = 20000; k >= 1; k--) {
        uint64_t want = k == 7 ? 70 : k;
        CHECK(vgpu_async_take(base + (k << 21), &out) == 0 && out.bytes == want && out.dev == (k == 7 ? 0 : (int32_t)(k % 3)),
              "async take %llu", (unsigned long long)k);
    }
    CHECK(vgpu_async_take(base + (5ULL << 21), &out) == -1, "async taken twice");
    CHECK(vgpu_async_take(base + 4096, &out) == -1, "never put");
}

/* Several threads putting and taking their own keys at once (as PyTorch's allocator threads do):
 * each take finds its own record. */
struct async_worker {
    uint64_t id;
    int bad;
};
static void *async_work(void *arg)
{
    struct async_worker *w = arg;
    struct vgpu_async_entry e, out;
    for (uint64_t round = 0; round < 200; round++) {
        for (uint64_t k = 1; k <= 64; k++) {
            e = (struct vgpu_async_entry){.key = ((w->id << 40) | (k << 21)), .bytes = w->id * 1000 + k + round};
            if (vgpu_async_put(&e, &out) != 0)
                w->bad++;
        }
        for (uint64_t k = 1; k <= 64; k++)
            if (vgpu_async_take((w->id << 40) | (k << 21), &out) != 0 || out.bytes != w->id * 1000 + k + round)
                w->bad++;
    }
    return NULL;
}

static void async_threads(void)
{
    pthread_t t[8];
    struct async_worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct async_worker){.id = (uint64_t)i + 1};
        pthread_create(&t[i], NULL, async_work, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].bad == 0, "thread %d: %d wrong puts or takes", i, w[i].bad);
    }
}

int main(void)
{
    layout();
    sizes();
    table();
    async_table();
    async_threads();
    printf("unit: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
