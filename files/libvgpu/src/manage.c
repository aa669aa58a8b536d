/* manage: inspect and repair a container's vgpu.region.
 *   manage --stats [--json] [--no-sweep] [--region FILE]
 *   manage --reset [--region FILE]       repair and reclaim while processes may be live
 *   manage --hold-lock SECONDS           (tests) take the lock, leave seq odd, sleep
 * The region is $VGPU_REGION_DIR/vgpu.region (default /var/run/vgpu/vgpu.region). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "region.h"

static void usage(void)
{
    fprintf(stderr, "usage: manage --stats [--json] [--no-sweep] [--region FILE]\n"
                    "       manage --reset [--region FILE]\n");
    exit(2);
}

/* The region file, never through a symlink nor blocking on a FIFO: run as root on the host,
 * manage must not be turned against another file by what a container left in its folder. */
static struct vgpu_region *map_raw(const char *path, int grow, int *fd_out)
{
    char err[800];
    int fd = vgpu_region_open(path, 0, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "manage: %s\n", err);
        exit(1);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)VGPU_REGION_SIZE) {
        if (!grow) {
            fprintf(stderr, "manage: %s is %lld bytes, not a region (%u bytes); manage --reset rebuilds it\n", path,
                    (long long)st.st_size, (unsigned)VGPU_REGION_SIZE);
            exit(1);
        }
        if (ftruncate(fd, VGPU_REGION_SIZE) != 0) {
            fprintf(stderr, "manage: %s is too small and cannot be grown: %s\n", path, strerror(errno));
            exit(1);
        }
    }
    void *m = mmap(NULL, VGPU_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "manage: cannot map %s: %s\n", path, strerror(errno));
        exit(1);
    }
    *fd_out = fd;
    return m;
}

static void repair(struct vgpu_region *r, int fd)
{
    flock(fd, LOCK_EX);
    if (!vgpu_region_header_valid(r)) {
        printf("region header invalid (magic %#x, version %u): re-initialised; live processes re-register\n",
               r->hdr.magic, r->hdr.version);
        uint32_t resets = r->hdr.reset_count;
        vgpu_region_init_header(r);
        r->hdr.reset_count = resets + 1;
        flock(fd, LOCK_UN);
        return;
    }
    /* never hang forever on a lock held by a stopped (live) process */
    vgpu_region_lock_timed(r, 10);
    int bad = 0, dead = 0;
    vgpu_region_repair_locked(r, &bad, &dead);
    r->hdr.reset_count++;
    vgpu_region_unlock(r);
    flock(fd, LOCK_UN);
    printf("region repaired: %d dead processes reclaimed, %d corrupt slots cleared, totals recomputed\n", dead, bad);
}

static void say_holding(void)
{
    printf("holding\n");
    fflush(stdout);
}

static void uuid_text(const struct vgpu_region_device *d, char *out, size_t len)
{
    const uint8_t *u = d->uuid;
    if (!d->uuid_valid) {
        snprintf(out, len, "null");
        return;
    }
    snprintf(out, len, "\"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

#define MIB(x) ((double)(x) / (1024.0 * 1024.0))

static void print_text(const struct vgpu_region *r, const char *path)
{
    const struct vgpu_region_header *h = &r->hdr;
    printf("region %s (version %u, flags %#x, context charge %.0f MiB)\n", path, h->version, h->flags,
           MIB(h->ctx_reserve_bytes));
    if (h->restored_count)
        printf("warning: %u times a process found the region below what it holds and restored it (a process of the "
               "container wrote the region)\n",
               h->restored_count);
    unsigned n = h->device_count ? h->device_count : 1;
    for (unsigned d = 0; d < n && d < VGPU_MAX_DEVICES; d++) {
        const struct vgpu_region_device *dv = &h->devices[d];
        char uuid[64];
        uuid_text(dv, uuid, sizeof uuid);
        printf("device %u %s: quota %.0f MiB, used %.1f MiB, contexts %.1f MiB, peak memory %.1f MiB\n", d, uuid,
               MIB(dv->limit_bytes), MIB(dv->used_bytes), MIB(dv->ctx_bytes), MIB(dv->peak_bytes));
        printf("  buffers allocated %llu, freed %llu, live %llu, peak buffers %llu, refused %u\n",
               (unsigned long long)dv->alloc_count, (unsigned long long)dv->free_count,
               (unsigned long long)dv->live_buffers, (unsigned long long)dv->peak_buffers, dv->oom_count);
        printf("  bytes allocated %llu, freed %llu\n", (unsigned long long)dv->bytes_allocated,
               (unsigned long long)dv->bytes_freed);
        if (dv->reclaimed_buffers)
            printf("  leak warning: %llu buffers (%.1f MiB) were never freed by their process; reclaimed after it "
                   "exited\n",
                   (unsigned long long)dv->reclaimed_buffers, MIB(dv->reclaimed_bytes));
        const struct vgpu_region_truth *t = &h->truth[d];
        if (t->checked_ns)
            printf("  the GPU's own count (NVML) at the last check: %.1f MiB, %.1f MiB of it where no hook sees; "
                   "%.1f MiB admitted since\n",
                   MIB(t->nvml_bytes), MIB(t->excess_bytes), MIB(t->admitted_bytes));
    }
    int live = 0;
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        const struct vgpu_region_slot *s = &r->slots[i];
        if (s->state != 1)
            continue;
        live++;
        printf("pid %u (%.16s):", s->pid, s->comm);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
            const struct vgpu_slot_device *sd = &s->devices[d];
            if (sd->used_bytes || sd->ctx_bytes || sd->buffers)
                printf(" device %u live memory %.1f MiB in %llu buffers (+%.1f MiB contexts, peak %.1f MiB);", d,
                       MIB(sd->used_bytes), (unsigned long long)sd->buffers, MIB(sd->ctx_bytes), MIB(sd->peak_bytes));
        }
        if (s->launches)
            printf(" %llu launches", (unsigned long long)s->launches);
        for (unsigned d = 0; s->nvml_ns && d < VGPU_MAX_DEVICES; d++)
            if (s->nvml_bytes[d])
                printf(" NVML said device %u: %.1f MiB;", d, MIB(s->nvml_bytes[d]));
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
            if (s->pending_bytes[d])
                printf(" device %u: %.1f MiB charged that the driver has not taken yet (a device heap);", d,
                       MIB(s->pending_bytes[d]));
        printf("\n");
    }
    if (!live)
        printf("no live processes\n");
}

static void json_string(const char *s, size_t max)
{
    putchar('"');
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* The region's flags word, one bit per switch, named as src/switches.def names them. */
static const struct {
    const char *key;
    unsigned bit;
} flag_bits[] = {
#define SWITCH(key, env, field, def, bit) {#key, bit},
#include "switches.def"
#undef SWITCH
};

static void print_json(const struct vgpu_region *r, const char *path)
{
    const struct vgpu_region_header *h = &r->hdr;
    printf("{\"region\": ");
    json_string(path, 4096);
    printf(", \"version\": %u, \"flags\": {", h->version);
    for (size_t i = 0; i < sizeof flag_bits / sizeof flag_bits[0]; i++)
        printf("%s\"%s\": %u", i ? ", " : "", flag_bits[i].key, h->flags >> flag_bits[i].bit & 1);
    printf("}, \"ctx_reserve_bytes\": %llu, \"reset_count\": %u, \"restored_count\": %u, \"cgroup\": ",
           (unsigned long long)h->ctx_reserve_bytes, h->reset_count, h->restored_count);
    json_string(h->cgroup, sizeof h->cgroup);
    printf(", \"devices\": [");
    for (unsigned d = 0; d < h->device_count && d < VGPU_MAX_DEVICES; d++) {
        const struct vgpu_region_device *dv = &h->devices[d];
        char uuid[64];
        uuid_text(dv, uuid, sizeof uuid);
        printf("%s{\"index\": %u, \"uuid\": %s, \"limit_bytes\": %llu, \"used_bytes\": %llu, \"ctx_bytes\": %llu, "
               "\"peak_bytes\": %llu, \"live_buffers\": %llu, \"peak_buffers\": %llu, \"alloc_count\": %llu, "
               "\"free_count\": %llu, \"bytes_allocated\": %llu, \"bytes_freed\": %llu, \"reclaimed_buffers\": %llu, "
               "\"reclaimed_bytes\": %llu, \"oom_count\": %u, \"nvml_bytes\": %llu, \"nvml_excess_bytes\": %llu, "
               "\"nvml_checked_ns\": %llu}",
               d ? ", " : "", d, uuid, (unsigned long long)dv->limit_bytes, (unsigned long long)dv->used_bytes,
               (unsigned long long)dv->ctx_bytes, (unsigned long long)dv->peak_bytes,
               (unsigned long long)dv->live_buffers, (unsigned long long)dv->peak_buffers,
               (unsigned long long)dv->alloc_count, (unsigned long long)dv->free_count,
               (unsigned long long)dv->bytes_allocated, (unsigned long long)dv->bytes_freed,
               (unsigned long long)dv->reclaimed_buffers, (unsigned long long)dv->reclaimed_bytes, dv->oom_count,
               (unsigned long long)h->truth[d].nvml_bytes, (unsigned long long)h->truth[d].excess_bytes,
               (unsigned long long)h->truth[d].checked_ns);
    }
    printf("], \"processes\": [");
    int first = 1;
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        const struct vgpu_region_slot *s = &r->slots[i];
        if (s->state != 1)
            continue;
        printf("%s{\"pid\": %u, \"start_time\": %llu, \"comm\": ", first ? "" : ", ", s->pid,
               (unsigned long long)s->start_time);
        json_string(s->comm, sizeof s->comm);
        printf(", \"launches\": %llu, \"nvml_ns\": %llu, \"devices\": [", (unsigned long long)s->launches,
               (unsigned long long)s->nvml_ns);
        int fd = 1;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
            const struct vgpu_slot_device *sd = &s->devices[d];
            if (!sd->used_bytes && !sd->ctx_bytes && !sd->buffers)
                continue;
            printf("%s{\"index\": %u, \"used_bytes\": %llu, \"ctx_bytes\": %llu, \"peak_bytes\": %llu, "
                   "\"buffers\": %llu, \"nvml_bytes\": %llu}",
                   fd ? "" : ", ", d, (unsigned long long)sd->used_bytes, (unsigned long long)sd->ctx_bytes,
                   (unsigned long long)sd->peak_bytes, (unsigned long long)sd->buffers,
                   (unsigned long long)s->nvml_bytes[d]);
            fd = 0;
        }
        printf("]}");
        first = 0;
    }
    printf("]}\n");
}

int main(int argc, char **argv)
{
    int stats = 0, reset = 0, json = 0, sweep = 1, hold = -1;
    const char *path = NULL;
    char def[600];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--stats") == 0)
            stats = 1;
        else if (strcmp(argv[i], "--reset") == 0)
            reset = 1;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--no-sweep") == 0)
            sweep = 0;
        else if (strcmp(argv[i], "--region") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strcmp(argv[i], "--hold-lock") == 0 && i + 1 < argc)
            hold = (int)vgpu_decimal(argv[++i], NULL);
        else
            usage();
    }
    if (!stats && !reset && hold < 0)
        usage();
    if (!path) {
        char dir[512];
        int explicit_dir;
        vgpu_config_region_dir(dir, sizeof dir, &explicit_dir);
        snprintf(def, sizeof def, "%s/%s", dir, VGPU_REGION_FILE);
        path = def;
    }
    int fd;
    struct vgpu_region *r = map_raw(path, reset, &fd);
    if (hold >= 0) {
        /* test aid: die (kill -9) while holding the lock in the middle of an update */
        vgpu_region_stall_in_update(r, (unsigned)hold, say_holding);
        return 0;
    }
    if (reset) {
        repair(r, fd);
    } else if (!vgpu_region_header_valid(r)) {
        fprintf(stderr, "manage: %s is not a valid version %u region (magic %#x, version %u); run manage --reset\n",
                path, VGPU_REGION_VERSION, r->hdr.magic, r->hdr.version);
        return 1;
    } else if (sweep) {
        vgpu_region_lock(r);
        vgpu_region_sweep_locked(r);
        vgpu_region_unlock(r);
    }
    if (json)
        print_json(r, path);
    else
        print_text(r, path);
    return 0;
}
