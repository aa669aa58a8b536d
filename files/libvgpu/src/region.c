/* The shared accounting region (docs/region-format.md): one file per container, mapped by every
 * process, guarded by a process-shared robust mutex, published to lock-free readers by a
 * sequence counter. Slots are never moved, so a process's slot index stays valid. */
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

/* getpid() is a system call; the hot path asks often. Forgotten in a fork child. */
static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

/* What this process holds by its own count, per device (used_bytes, ctx_bytes, buffers). The
 * region is writable by every process of the container: what it says is checked against this. */
static struct vgpu_slot_device mine[VGPU_MAX_DEVICES];
static uint64_t my_pending[VGPU_MAX_DEVICES]; /* charged, not yet taken by the driver */
static int told_restored;

/* Whose driver file descriptors this process holds without having taken memory with them: its
 * parent's, after a fork (0: none). Inherited by its own children when it holds nothing. */
static uint32_t heir_of_pid;
static uint64_t heir_of_start, own_start;

/* What a fork child needs of its parent, taken in the parent just before the fork (the child's
 * handlers may run after the parent is gone, and in any order). */
static struct {
    uint32_t pid;
    uint64_t start;
} parent;

static void before_fork(void)
{
    int holds = 0;
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
        holds |= mine[d].used_bytes + mine[d].ctx_bytes > 0;
    parent.pid = holds || !heir_of_pid ? (uint32_t)getpid() : heir_of_pid;
    parent.start = holds || !heir_of_pid ? own_start : heir_of_start;
}

static void forget_pid(void)
{
    cached_pid = 0;
    memset(mine, 0, sizeof mine); /* a fork child holds none of its parent's memory */
    memset(my_pending, 0, sizeof my_pending);
}
static void register_forget(void)
{
    pthread_atfork(before_fork, NULL, forget_pid);
}
static pid_t my_pid(void)
{
    pthread_once(&pid_once, register_forget);
    if (!cached_pid)
        cached_pid = getpid();
    return cached_pid;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Writers hold the lock, so seq is even here unless a writer died mid-update (or the region was
 * scribbled on): then it is odd already, and steps by 2 to stay odd while this update runs. */
static void write_begin(struct vgpu_region *r)
{
    uint64_t s = __atomic_load_n(&r->hdr.seq, __ATOMIC_RELAXED);
    __atomic_store_n(&r->hdr.seq, s + 1 + (s & 1), __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void write_end(struct vgpu_region *r)
{
    r->hdr.updated_ns = now_ns();
    __atomic_fetch_add(&r->hdr.seq, 1, __ATOMIC_RELEASE);
}

void vgpu_region_init_lock(struct vgpu_region *r)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    memset(&r->hdr.lock, 0, sizeof r->hdr.lock);
    pthread_mutex_init(&r->hdr.lock.mutex, &a);
    pthread_mutexattr_destroy(&a);
}

void vgpu_region_init_header(struct vgpu_region *r)
{
    memset(r, 0, sizeof *r);
    struct vgpu_region_header *h = &r->hdr;
    h->magic = VGPU_REGION_MAGIC;
    h->version = VGPU_REGION_VERSION;
    h->header_size = VGPU_HEADER_SIZE;
    h->device_size = VGPU_DEVICE_SIZE;
    h->max_devices = VGPU_MAX_DEVICES;
    h->slot_size = VGPU_SLOT_SIZE;
    h->max_slots = VGPU_MAX_SLOTS;
    h->file_size = VGPU_REGION_SIZE;
    h->created_ns = now_ns();
    vgpu_region_init_lock(r);
    __atomic_store_n(&h->state, 1, __ATOMIC_RELEASE);
}

int vgpu_region_header_valid(const struct vgpu_region *r)
{
    const struct vgpu_region_header *h = &r->hdr;
    return h->magic == VGPU_REGION_MAGIC && h->version == VGPU_REGION_VERSION && h->header_size == VGPU_HEADER_SIZE
        && h->device_size == VGPU_DEVICE_SIZE && h->max_devices == VGPU_MAX_DEVICES
        && h->slot_size == VGPU_SLOT_SIZE && h->max_slots == VGPU_MAX_SLOTS && h->file_size == VGPU_REGION_SIZE
        && h->state == 1 && h->device_count <= VGPU_MAX_DEVICES;
}

int vgpu_region_open(const char *path, int create, char *err, size_t errlen)
{
    const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = open(path, flags);
    if (fd < 0 && errno == ENOENT && create) {
        fd = open(path, flags | O_CREAT | O_EXCL, 0666);
        if (fd >= 0)
            (void)fchmod(fd, 0666); /* every uid in the container shares it, whatever the umask */
        else if (errno == EEXIST)
            fd = open(path, flags);
    }
    if (fd < 0) {
        if (errno == ELOOP)
            snprintf(err, errlen, "%s is a symbolic link: refused (a region is a plain file)", path);
        else
            snprintf(err, errlen, "cannot open region %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    const char *bad = NULL;
    if (fstat(fd, &st) != 0)
        bad = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        bad = "is not a regular file: refused";
    else if (st.st_nlink != 1)
        bad = "has more than one hard link: refused";
    if (bad) {
        snprintf(err, errlen, "%s %s", path, bad);
        close(fd);
        return -1;
    }
    return fd;
}

struct vgpu_region *vgpu_region_map_file(const char *path, int create, char *err, size_t errlen)
{
    int fd = vgpu_region_open(path, create, err, errlen);
    if (fd < 0)
        return NULL;
    /* flock serialises creation and re-initialisation only; accounting uses the mutex. */
    if (flock(fd, LOCK_EX) != 0) {
        snprintf(err, errlen, "cannot lock region %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_size < (off_t)VGPU_REGION_SIZE && ftruncate(fd, VGPU_REGION_SIZE) != 0)) {
        snprintf(err, errlen, "cannot size region %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    struct vgpu_region *r = mmap(NULL, VGPU_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        snprintf(err, errlen, "cannot map region %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!vgpu_region_header_valid(r)) {
        if (r->hdr.magic != 0)
            vgpu_log(VGPU_WARN, "region %s has an invalid header (magic %#x version %u): re-initialising", path,
                     r->hdr.magic, r->hdr.version);
        vgpu_region_init_header(r);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return r;
}

struct vgpu_region *vgpu_region_map(const char *dir, int explicit_dir, int create, char *err, size_t errlen)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, VGPU_REGION_FILE);
    struct vgpu_region *r = vgpu_region_map_file(path, create, err, errlen);
    if (r || explicit_dir)
        return r;
    /* Run by hand without a region folder: account this process alone. */
    vgpu_log(VGPU_INFO, "%s; accounting this process alone", err);
    r = mmap(NULL, VGPU_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
        snprintf(err, errlen, "cannot map anonymous region: %s", strerror(errno));
        return NULL;
    }
    vgpu_region_init_header(r);
    return r;
}

/* Slots at and above slot_high are free: readers and admission scan below it only. */
static unsigned slot_high(const struct vgpu_region *r)
{
    return r->hdr.slot_high < VGPU_MAX_SLOTS ? r->hdr.slot_high : VGPU_MAX_SLOTS;
}

static void trim_slot_high_locked(struct vgpu_region *r)
{
    unsigned n = slot_high(r);
    while (n > 0 && r->slots[n - 1].state == 0 && r->slots[n - 1].pid == 0)
        n--;
    r->hdr.slot_high = n;
}

void vgpu_region_recompute_locked(struct vgpu_region *r)
{
    write_begin(r);
    unsigned high = 0;
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++)
        if (r->slots[i].state != 0 || r->slots[i].pid != 0)
            high = i + 1;
    r->hdr.slot_high = high;
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
        uint64_t used = 0, ctx = 0, bufs = 0;
        for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
            const struct vgpu_region_slot *s = &r->slots[i];
            if (s->state != 1)
                continue;
            used += s->devices[d].used_bytes;
            ctx += s->devices[d].ctx_bytes;
            bufs += s->devices[d].buffers;
        }
        struct vgpu_region_device *dv = &r->hdr.devices[d];
        dv->used_bytes = used;
        dv->ctx_bytes = ctx;
        dv->live_buffers = bufs;
    }
    if (r->hdr.device_count > VGPU_MAX_DEVICES)
        r->hdr.device_count = VGPU_MAX_DEVICES;
    write_end(r);
}

void vgpu_region_repair_locked(struct vgpu_region *r, int *bad, int *dead)
{
    *bad = 0;
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        struct vgpu_region_slot *s = &r->slots[i];
        /* a slot that is not clearly live or clearly free is garbage */
        if ((s->state == 1 && s->pid == 0) || s->state > 1 || (s->state == 0 && s->pid != 0)) {
            write_begin(r);
            memset(s, 0, sizeof *s);
            write_end(r);
            (*bad)++;
        }
    }
    *dead = vgpu_region_sweep_locked(r);
    vgpu_region_recompute_locked(r);
    write_begin(r);
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
        struct vgpu_region_device *dv = &r->hdr.devices[d];
        uint64_t in_use = dv->used_bytes + dv->ctx_bytes;
        if (dv->peak_bytes < in_use)
            dv->peak_bytes = in_use;
        if (dv->peak_buffers < dv->live_buffers)
            dv->peak_buffers = dv->live_buffers;
    }
    write_end(r);
}

void vgpu_region_lock(struct vgpu_region *r)
{
    int rc = pthread_mutex_lock(&r->hdr.lock.mutex);
    if (rc == EOWNERDEAD) {
        vgpu_log(VGPU_WARN, "region lock holder %u died; recovering", r->hdr.lock_owner_pid);
        vgpu_region_recompute_locked(r);
        r->hdr.reset_count++;
        pthread_mutex_consistent(&r->hdr.lock.mutex);
    } else if (rc != 0) {
        /* ENOTRECOVERABLE or a mutex scribbled over: rebuild it; accounting is recomputed. */
        vgpu_log(VGPU_WARN, "region lock unusable (%s); re-initialising it", strerror(rc));
        vgpu_region_init_lock(r);
        pthread_mutex_lock(&r->hdr.lock.mutex);
        vgpu_region_recompute_locked(r);
        r->hdr.reset_count++;
    }
    r->hdr.lock_owner_pid = (uint32_t)my_pid();
}

void vgpu_region_unlock(struct vgpu_region *r)
{
    r->hdr.lock_owner_pid = 0;
    pthread_mutex_unlock(&r->hdr.lock.mutex);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

/* Device dev's use summed over the live slots: (used, contexts, buffers). */
static void slot_sums_locked(const struct vgpu_region *r, int dev, uint64_t *used, uint64_t *ctx, uint64_t *bufs)
{
    *used = *ctx = *bufs = 0;
    for (unsigned i = 0, n = slot_high(r); i < n; i++) {
        const struct vgpu_region_slot *s = &r->slots[i];
        if (s->state != 1)
            continue;
        *used = sat_add(*used, s->devices[dev].used_bytes);
        *ctx = sat_add(*ctx, s->devices[dev].ctx_bytes);
        *bufs = sat_add(*bufs, s->devices[dev].buffers);
    }
}

/* What admission compares with the quota: the largest of the device total, the sum of the slots
 * and this process's own holdings. A process of the container that lowers the total (or its
 * slots) gets no other process past the quota: the totals are taken from the slots again, and
 * no process ever passes the quota by its own count. */
/* Whether a live process of the container holds the driver's file descriptors of (pid, start)
 * (it was forked from that process, or from one of its heirs that held nothing of its own). */
static int heir_lives_locked(const struct vgpu_region *r, uint32_t pid, uint64_t start)
{
    for (unsigned i = 0, n = slot_high(r); i < n; i++) {
        const struct vgpu_region_slot *s = &r->slots[i];
        if (s->state == 1 && s->heir_of_pid == pid && s->heir_of_start == start
            && vgpu_proc_alive((int)s->pid, s->start_time, NULL))
            return 1;
    }
    return 0;
}

/* Whether the memory of (pid, start) is still held: the process lives, or an heir of it does. */
static int held_on_locked(const struct vgpu_region *r, uint32_t pid, uint64_t start)
{
    return vgpu_proc_alive((int)pid, start, NULL) || heir_lives_locked(r, pid, start);
}

/* What processes that exited still hold on dev until they and their heirs are gone (the others'
 * entries cleared). */
static uint64_t exiting_locked(struct vgpu_region *r, int dev)
{
    uint64_t held = 0;
    for (unsigned i = 0; i < VGPU_MAX_EXITS; i++) {
        struct vgpu_region_exit *e = &r->hdr.exits[i];
        if (!e->pid)
            continue;
        if (!held_on_locked(r, e->pid, e->start_time)) {
            write_begin(r);
            memset(e, 0, sizeof *e);
            write_end(r);
        } else if (e->dev == dev) {
            held = sat_add(held, e->bytes);
        }
    }
    return held;
}

static uint64_t in_use_locked(struct vgpu_region *r, int dev)
{
    struct vgpu_region_device *d = &r->hdr.devices[dev];
    uint64_t used, ctx, bufs;
    slot_sums_locked(r, dev, &used, &ctx, &bufs);
    if (sat_add(used, ctx) > sat_add(d->used_bytes, d->ctx_bytes)) {
        write_begin(r);
        d->used_bytes = used;
        d->ctx_bytes = ctx;
        d->live_buffers = bufs;
        r->hdr.restored_count++;
        write_end(r);
    }
    uint64_t in_use = sat_add(d->used_bytes, d->ctx_bytes), own = sat_add(mine[dev].used_bytes, mine[dev].ctx_bytes);
    return sat_add(in_use > own ? in_use : own, exiting_locked(r, dev));
}

/* Our slot must say what we hold. When someone else wrote it (a process of the container, a
 * region re-initialised under us), it is restored and the totals recomputed from the slots. */
static void restore_own_locked(struct vgpu_region *r, struct vgpu_region_slot *sl, int slot, int dev)
{
    struct vgpu_slot_device *s = &sl->devices[dev];
    if ((unsigned)slot >= r->hdr.slot_high) {
        write_begin(r);
        r->hdr.slot_high = (uint32_t)slot + 1;
        write_end(r);
    }
    if (s->used_bytes == mine[dev].used_bytes && s->ctx_bytes == mine[dev].ctx_bytes
        && s->buffers == mine[dev].buffers && sl->pending_bytes[dev] == my_pending[dev])
        return;
    if (!told_restored++)
        vgpu_log(VGPU_WARN,
                 "the region said this process holds %llu bytes on device %d, it holds %llu: restored (another "
                 "process wrote the region)",
                 (unsigned long long)s->used_bytes, dev, (unsigned long long)mine[dev].used_bytes);
    write_begin(r);
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
        sl->devices[d].used_bytes = mine[d].used_bytes;
        sl->devices[d].ctx_bytes = mine[d].ctx_bytes;
        sl->devices[d].buffers = mine[d].buffers;
        sl->pending_bytes[d] = my_pending[d];
    }
    r->hdr.restored_count++;
    write_end(r);
    vgpu_region_recompute_locked(r);
}

static void reclaim_slot_locked(struct vgpu_region *r, struct vgpu_region_slot *s)
{
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
        struct vgpu_region_device *dv = &r->hdr.devices[d];
        struct vgpu_slot_device *sd = &s->devices[d];
        dv->used_bytes = sat_sub(dv->used_bytes, sd->used_bytes);
        dv->ctx_bytes = sat_sub(dv->ctx_bytes, sd->ctx_bytes);
        dv->live_buffers = sat_sub(dv->live_buffers, sd->buffers);
        dv->reclaimed_buffers += sd->buffers;
        dv->reclaimed_bytes += sd->used_bytes;
    }
    memset(s, 0, sizeof *s);
}

static int leave_exits_locked(struct vgpu_region *r, struct vgpu_region_slot *s);

int vgpu_region_sweep_locked(struct vgpu_region *r)
{
    int reclaimed = 0;
    const char *cg = (r->hdr.flags & (1u << 3)) ? r->hdr.cgroup : NULL;
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        struct vgpu_region_slot *s = &r->slots[i];
        if (s->state == 0 && s->pid == 0)
            continue;
        if (s->state == 1 && vgpu_proc_alive((int)s->pid, s->start_time, cg))
            continue;
        write_begin(r);
        /* killed with memory that a process it forked still holds: counted on as exit records */
        if (!(s->state == 1 && heir_lives_locked(r, s->pid, s->start_time) && leave_exits_locked(r, s)))
            reclaim_slot_locked(r, s);
        write_end(r);
        reclaimed++;
    }
    if (reclaimed) {
        write_begin(r);
        trim_slot_high_locked(r);
        write_end(r);
    }
    return reclaimed;
}

static void read_comm(char *out, size_t len)
{
    memset(out, 0, len);
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n > 0 && out[n - 1] == '\n')
        out[n - 1] = '\0';
}

static int attach_locked(struct vgpu_region *r)
{
    int me = my_pid();
    uint64_t start = vgpu_proc_start_time(me);
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        struct vgpu_region_slot *s = &r->slots[i];
        /* our own pid from before an exec(): that image's memory is gone */
        if (s->state == 1 && (int)s->pid == me) {
            write_begin(r);
            reclaim_slot_locked(r, s);
            write_end(r);
        }
    }
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
        struct vgpu_region_slot *s = &r->slots[i];
        if (s->state != 0 || s->pid != 0)
            continue;
        write_begin(r);
        memset(s, 0, sizeof *s);
        s->pid = (uint32_t)me;
        s->start_time = start;
        own_start = start;
        s->attach_ns = now_ns();
        read_comm(s->comm, sizeof s->comm);
        s->state = 1;
        if (i + 1 > r->hdr.slot_high)
            r->hdr.slot_high = i + 1;
        write_end(r);
        return (int)i;
    }
    return -1;
}

int vgpu_region_attach(struct vgpu_region *r, const struct vgpu_config *cfg)
{
    vgpu_region_lock(r);
    vgpu_region_sweep_locked(r);
    int slot = attach_locked(r);
    /* a per-device quota names the devices in use; one quota for all names none */
    int same = 1;
    for (unsigned d = 1; d < VGPU_MAX_DEVICES; d++)
        same &= cfg->limit[d] == cfg->limit[0];
    write_begin(r);
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
        r->hdr.devices[d].limit_bytes = cfg->limit[d];
        if (!same && cfg->limit[d] && r->hdr.device_count < d + 1)
            r->hdr.device_count = d + 1;
    }
    r->hdr.flags = vgpu_config_flags(cfg);
    r->hdr.ctx_reserve_bytes = cfg->ctx_reserve;
    if (cfg->cgroup_enable) {
        char cg[256];
        vgpu_proc_cgroup(getpid(), cg, sizeof cg);
        memcpy(r->hdr.cgroup, cg, sizeof cg);
    }
    write_end(r);
    vgpu_region_unlock(r);
    if (slot < 0)
        vgpu_log(VGPU_ERR, "region is full (%u live processes): this process is not accounted", VGPU_MAX_SLOTS);
    return slot;
}

/* Slot s's memory as exit records (one per device it holds memory on), counted until its process
 * and its heirs are gone, and s reclaimed; nothing done (0) when the records have no room. Inside
 * a write. */
static int leave_exits_locked(struct vgpu_region *r, struct vgpu_region_slot *s)
{
    unsigned free_entries = 0, need = 0;
    for (unsigned i = 0; i < VGPU_MAX_EXITS; i++)
        free_entries += !r->hdr.exits[i].pid || !held_on_locked(r, r->hdr.exits[i].pid, r->hdr.exits[i].start_time);
    for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
        need += s->devices[d].used_bytes + s->devices[d].ctx_bytes > 0;
    if (need > free_entries)
        return 0;
    for (unsigned d = 0, i = 0; d < VGPU_MAX_DEVICES; d++) {
        uint64_t held = sat_add(s->devices[d].used_bytes, s->devices[d].ctx_bytes);
        if (!held)
            continue;
        while (r->hdr.exits[i].pid && held_on_locked(r, r->hdr.exits[i].pid, r->hdr.exits[i].start_time))
            i++;
        r->hdr.exits[i] = (struct vgpu_region_exit){s->pid, (int32_t)d, s->start_time, held};
        i++;
    }
    reclaim_slot_locked(r, s);
    trim_slot_high_locked(r);
    return 1;
}

int vgpu_region_fork_child(struct vgpu_region *r, int parent_slot)
{
    forget_pid(); /* whichever fork handler runs first, this process is not its parent */
    if (!r || parent_slot < 0 || !parent.pid)
        return -1;
    vgpu_region_lock(r);
    int slot = attach_locked(r);
    if (slot >= 0) {
        /* the parent's memory, or what the parent kept alive without holding any of its own */
        heir_of_pid = parent.pid;
        heir_of_start = parent.start;
        write_begin(r);
        r->slots[slot].heir_of_pid = heir_of_pid;
        r->slots[slot].heir_of_start = heir_of_start;
        write_end(r);
    }
    vgpu_region_unlock(r);
    return slot;
}

void vgpu_region_detach(struct vgpu_region *r, int slot)
{
    if (slot < 0 || (unsigned)slot >= VGPU_MAX_SLOTS)
        return;
    vgpu_region_lock(r);
    struct vgpu_region_slot *s = &r->slots[slot];
    if ((int)s->pid == getpid() && s->state == 1) {
        /* the driver frees our memory after this: admission counts it until we (and any process
         * we forked, which holds the driver's file descriptors too) are gone; else the slot stays,
         * reclaimed once we are gone */
        write_begin(r);
        leave_exits_locked(r, s);
        write_end(r);
    }
    vgpu_region_unlock(r);
}

/* The slot must still be ours: a re-initialised region or a fork loses it; take a new one.
 * NULL when the region is full (then only the device totals are kept). */
static struct vgpu_region_slot *own_slot_locked(struct vgpu_region *r, int *slot)
{
    int i = *slot;
    if (i >= 0 && (unsigned)i < VGPU_MAX_SLOTS && r->slots[i].state == 1 && (int)r->slots[i].pid == my_pid())
        return &r->slots[i];
    *slot = attach_locked(r);
    return *slot >= 0 ? &r->slots[*slot] : NULL;
}

/* Lock the region, and make sure our slot says what we hold (NULL: the region is full). */
static struct vgpu_region_slot *enter(struct vgpu_region *r, int *slot, int dev)
{
    vgpu_region_lock(r);
    struct vgpu_region_slot *sl = own_slot_locked(r, slot);
    if (sl)
        restore_own_locked(r, sl, *slot, dev);
    return sl;
}

/* The GPU's own count (truth) for this container's live processes on dev: their rows summed,
 * each slot's figure recorded (manage --stats, cgpu-monitor). Caller holds the lock, in a write. */
static uint64_t truth_sum_locked(struct vgpu_region *r, int dev, const struct vgpu_truth *t)
{
    uint64_t sum = 0;
    for (unsigned i = 0, n = slot_high(r); i < n; i++) {
        struct vgpu_region_slot *s = &r->slots[i];
        if (s->state != 1)
            continue;
        uint64_t held = 0;
        for (unsigned k = 0; k < t->n && k < VGPU_TRUTH_ROWS; k++)
            if (t->pid[k] == s->pid)
                held = sat_add(held, t->bytes[k]);
        s->nvml_bytes[dev] = held;
        s->nvml_ns = t->ns;
        sum = sat_add(sum, held);
    }
    /* processes gone from the slots whose memory is still held (exited; or killed, with heirs) */
    for (unsigned i = 0; i < VGPU_MAX_EXITS; i++) {
        const struct vgpu_region_exit *e = &r->hdr.exits[i];
        int seen = 0;
        for (unsigned j = 0; j < i && !seen; j++)
            seen = r->hdr.exits[j].pid == e->pid;
        for (unsigned k = 0; e->pid && !seen && e->dev == dev && k < t->n && k < VGPU_TRUTH_ROWS; k++)
            if (t->pid[k] == e->pid)
                sum = sat_add(sum, t->bytes[k]);
    }
    return sum;
}

/* What the container's live processes charged on dev that the driver has not taken yet. */
static uint64_t pending_locked(const struct vgpu_region *r, int dev)
{
    uint64_t sum = 0;
    for (unsigned i = 0, n = slot_high(r); i < n; i++)
        if (r->slots[i].state == 1)
            sum = sat_add(sum, r->slots[i].pending_bytes[dev]);
    return sum;
}

/* Whether bytes more fit dev's limit (struct vgpu_limit says how; dead processes are swept once
 * before a refusal): 0 yes, -1 refused (counted), 1 the GPU's own count is needed first. */
static int admit_locked(struct vgpu_region *r, int dev, uint64_t bytes, const struct vgpu_limit *lim)
{
    if (!lim || !lim->enforce || !lim->limit)
        return 0;
    struct vgpu_region_truth *t = &r->hdr.truth[dev];
    uint64_t limit = lim->limit, allowance = lim->allowance < limit ? lim->allowance : limit;
    for (int pass = 0;; pass++) {
        uint64_t inuse = in_use_locked(r, dev), need;
        if (lim->truth) {
            write_begin(r);
            uint64_t nvml = truth_sum_locked(r, dev, lim->truth), ledger = lim->held ? sat_add(inuse, bytes) : inuse;
            /* what is charged but not taken yet is on the GPU's count too: the ledger holds it, and
             * without it here it would hide as much memory held where no hook sees */
            uint64_t gpu = sat_add(nvml, pending_locked(r, dev));
            t->nvml_bytes = nvml;
            t->excess_bytes = gpu > ledger ? gpu - ledger : 0;
            t->admitted_bytes = 0;
            t->checked_ns = lim->truth->ns;
            write_end(r);
            need = lim->held ? (gpu > ledger ? gpu : ledger) : sat_add(gpu > inuse ? gpu : inuse, bytes);
        } else {
            need = sat_add(inuse, bytes);
            uint64_t seen = sat_add(need, t->excess_bytes);
            int near = seen > limit - allowance || (allowance && sat_add(t->admitted_bytes, bytes) > allowance / 2);
            if (near && !lim->final)
                return 1;
            if (!lim->final || !near)
                need = seen; /* far from the limit: the ledger and what the last check found beyond it */
        }
        if (need <= limit)
            return 0; /* the caller counts the bytes admitted (count_admitted), in its own write */
        if (pass == 0 && vgpu_region_sweep_locked(r) > 0)
            continue;
        if (!lim->final)
            return 1;
        write_begin(r);
        r->hdr.devices[dev].oom_count++;
        write_end(r);
        return -1;
    }
}

/* Bytes admitted since the last check of the GPU's own count; inside a write. */
static void count_admitted(struct vgpu_region *r, int dev, uint64_t bytes, const struct vgpu_limit *lim)
{
    if (lim && lim->enforce && lim->limit)
        r->hdr.truth[dev].admitted_bytes = sat_add(r->hdr.truth[dev].admitted_bytes, bytes);
}

/* Our slot takes our own count again, and the peaks follow; inside a write. */
static void publish_locked(struct vgpu_region *r, struct vgpu_region_slot *sl, int dev)
{
    struct vgpu_region_device *d = &r->hdr.devices[dev];
    if (sl) {
        struct vgpu_slot_device *s = &sl->devices[dev];
        s->used_bytes = mine[dev].used_bytes;
        s->ctx_bytes = mine[dev].ctx_bytes;
        s->buffers = mine[dev].buffers;
        sl->pending_bytes[dev] = my_pending[dev];
        if (s->used_bytes + s->ctx_bytes > s->peak_bytes)
            s->peak_bytes = s->used_bytes + s->ctx_bytes;
    }
    if (d->used_bytes + d->ctx_bytes > d->peak_bytes)
        d->peak_bytes = d->used_bytes + d->ctx_bytes;
    if ((unsigned)dev + 1 > r->hdr.device_count)
        r->hdr.device_count = (uint32_t)dev + 1;
}

int vgpu_region_charge(struct vgpu_region *r, int *slot, int dev, int kind, uint64_t bytes,
                       const struct vgpu_limit *lim)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return 0;
    struct vgpu_region_slot *sl = enter(r, slot, dev);
    int rc = admit_locked(r, dev, bytes, lim);
    if (rc != 0) {
        vgpu_region_unlock(r);
        return rc;
    }
    struct vgpu_region_device *d = &r->hdr.devices[dev];
    struct vgpu_slot_device *m = &mine[dev];
    write_begin(r);
    count_admitted(r, dev, bytes, lim);
    if (kind == VGPU_DATA) {
        d->used_bytes += bytes;
        d->live_buffers++;
        d->alloc_count++;
        d->bytes_allocated += bytes;
        if (d->live_buffers > d->peak_buffers)
            d->peak_buffers = d->live_buffers;
        m->used_bytes += bytes;
        m->buffers++;
    } else {
        d->ctx_bytes += bytes;
        m->ctx_bytes += bytes;
    }
    publish_locked(r, sl, dev);
    write_end(r);
    vgpu_region_unlock(r);
    return 0;
}

void vgpu_region_uncharge(struct vgpu_region *r, int *slot, int dev, int kind, uint64_t bytes)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return;
    struct vgpu_region_slot *sl = enter(r, slot, dev);
    struct vgpu_region_device *d = &r->hdr.devices[dev];
    struct vgpu_slot_device *m = &mine[dev];
    write_begin(r);
    if (kind == VGPU_DATA || kind == VGPU_ROLLBACK) {
        /* only what this process still holds by its own count */
        uint64_t b = bytes < m->used_bytes ? bytes : m->used_bytes;
        d->used_bytes = sat_sub(d->used_bytes, b);
        d->live_buffers = sat_sub(d->live_buffers, m->buffers ? 1 : 0);
        if (kind == VGPU_ROLLBACK) {
            /* an admission undone because the driver failed: it never happened */
            d->alloc_count = sat_sub(d->alloc_count, 1);
            d->bytes_allocated = sat_sub(d->bytes_allocated, bytes);
        } else {
            d->free_count++;
            d->bytes_freed += bytes;
        }
        m->used_bytes -= b;
        m->buffers = sat_sub(m->buffers, 1);
    } else {
        uint64_t b = bytes < m->ctx_bytes ? bytes : m->ctx_bytes;
        d->ctx_bytes = sat_sub(d->ctx_bytes, b);
        m->ctx_bytes -= b;
    }
    publish_locked(r, sl, dev);
    write_end(r);
    vgpu_region_unlock(r);
}

int vgpu_region_adjust(struct vgpu_region *r, int *slot, int dev, int64_t bytes, int64_t buffers,
                       const struct vgpu_limit *lim)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return 0;
    struct vgpu_region_slot *sl = enter(r, slot, dev);
    int rc = bytes > 0 ? admit_locked(r, dev, (uint64_t)bytes, lim) : 0;
    if (rc != 0) {
        vgpu_region_unlock(r);
        return rc;
    }
    struct vgpu_region_device *d = &r->hdr.devices[dev];
    struct vgpu_slot_device *m = &mine[dev];
    /* never below zero: only what this process holds by its own count */
    uint64_t up = bytes > 0 ? (uint64_t)bytes : 0, down = bytes < 0 ? (uint64_t)-bytes : 0;
    uint64_t bufs_up = buffers > 0 ? (uint64_t)buffers : 0, bufs_down = buffers < 0 ? (uint64_t)-buffers : 0;
    down = down < m->used_bytes ? down : m->used_bytes;
    bufs_down = bufs_down < m->buffers ? bufs_down : m->buffers;
    write_begin(r);
    count_admitted(r, dev, up, lim);
    d->used_bytes = sat_sub(d->used_bytes, down) + up;
    d->live_buffers = sat_sub(d->live_buffers, bufs_down) + bufs_up;
    m->used_bytes = m->used_bytes - down + up;
    m->buffers = m->buffers - bufs_down + bufs_up;
    publish_locked(r, sl, dev);
    write_end(r);
    vgpu_region_unlock(r);
    return 0;
}

void vgpu_region_pending(struct vgpu_region *r, int *slot, int dev, int64_t delta)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES || !delta)
        return;
    struct vgpu_region_slot *sl = enter(r, slot, dev);
    write_begin(r);
    uint64_t down = delta < 0 ? (uint64_t)-delta : 0;
    __atomic_store_n(&my_pending[dev], delta > 0 ? sat_add(my_pending[dev], (uint64_t)delta) : sat_sub(my_pending[dev], down),
                     __ATOMIC_RELAXED);
    publish_locked(r, sl, dev);
    write_end(r);
    vgpu_region_unlock(r);
}

uint64_t vgpu_region_own_pending(int dev)
{
    return dev < 0 || dev >= VGPU_MAX_DEVICES ? 0 : __atomic_load_n(&my_pending[dev], __ATOMIC_RELAXED);
}

uint64_t vgpu_region_own_bytes(int dev)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return 0;
    return sat_add(__atomic_load_n(&mine[dev].used_bytes, __ATOMIC_RELAXED),
                   __atomic_load_n(&mine[dev].ctx_bytes, __ATOMIC_RELAXED));
}

unsigned vgpu_region_pids(const struct vgpu_region *r, uint32_t *pids, unsigned max)
{
    unsigned n = 0;
    for (unsigned i = 0, high = slot_high(r); i < high && n < max; i++)
        if (__atomic_load_n(&r->slots[i].state, __ATOMIC_RELAXED) == 1)
            pids[n++] = __atomic_load_n(&r->slots[i].pid, __ATOMIC_RELAXED);
    return n;
}

void vgpu_region_record_uuid(struct vgpu_region *r, int dev, const uint8_t uuid[16])
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES)
        return;
    vgpu_region_lock(r);
    write_begin(r);
    memcpy(r->hdr.devices[dev].uuid, uuid, 16);
    r->hdr.devices[dev].uuid_valid = 1;
    if (r->hdr.device_count < (uint32_t)dev + 1)
        r->hdr.device_count = (uint32_t)dev + 1;
    write_end(r);
    vgpu_region_unlock(r);
}

int vgpu_region_lock_timed(struct vgpu_region *r, unsigned seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    int rc = pthread_mutex_timedlock(&r->hdr.lock.mutex, &ts);
    if (rc == 0 || rc == EOWNERDEAD) {
        if (rc == EOWNERDEAD)
            pthread_mutex_consistent(&r->hdr.lock.mutex);
        r->hdr.lock_owner_pid = (uint32_t)my_pid();
        return 0;
    }
    vgpu_log(VGPU_WARN, "region lock held by pid %u for %u s (%s): rebuilding the lock", r->hdr.lock_owner_pid,
             seconds, strerror(rc));
    vgpu_region_init_lock(r);
    pthread_mutex_lock(&r->hdr.lock.mutex);
    r->hdr.lock_owner_pid = (uint32_t)my_pid();
    return 1;
}

void vgpu_region_stall_in_update(struct vgpu_region *r, unsigned seconds, void (*started)(void))
{
    vgpu_region_lock(r);
    write_begin(r);
    started();
    sleep(seconds);
    write_end(r);
    vgpu_region_unlock(r);
}

int vgpu_region_sample(const struct vgpu_region *r, struct vgpu_region_header *out)
{
    for (int i = 0; i < 100; i++) {
        uint64_t s1 = __atomic_load_n(&r->hdr.seq, __ATOMIC_ACQUIRE);
        if (!(s1 & 1)) {
            memcpy(out, &r->hdr, sizeof *out);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint64_t s2 = __atomic_load_n(&r->hdr.seq, __ATOMIC_RELAXED);
            if (s1 == s2)
                return 0;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return -1;
}
