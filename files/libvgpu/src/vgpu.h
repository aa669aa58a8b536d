/* libvgpu internal interfaces shared by the CUDA shim, the NVML shim and the tools. */
#ifndef VGPU_H
#define VGPU_H

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#define VGPU_HIDDEN __attribute__((visibility("hidden")))
/* For code that runs before a sanitizer runtime has set itself up: ASan resolves its interceptors
 * through dlsym while it initialises, so our dlsym hook runs before ASan's shadow memory exists. */
#define VGPU_EARLY __attribute__((no_sanitize("address", "undefined")))
#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_MAX_DEVICES 16
#define VGPU_MIB (1024ULL * 1024ULL)

/* ---- the container contract's fixed paths (docs/architecture.md) ---- */
/* VGPU_CONTRACT_ROOT moves them under a test folder in the tests' contract build only. */
#ifndef VGPU_CONTRACT_ROOT
#define VGPU_CONTRACT_ROOT ""
#endif
#define VGPU_QUOTA_FILE VGPU_CONTRACT_ROOT "/etc/vgpu/quota.conf" /* the device plugin's, read-only */
#define VGPU_CONTRACT_REGION_DIR VGPU_CONTRACT_ROOT "/var/run/vgpu"

/* ---- a lock for the hot paths' process-local tables ---- */
/* Test-and-set, yielding while another thread holds it: an uncontended lock and unlock are two
 * atomic instructions, a quarter of a pthread mutex pair, and the critical sections it guards are
 * a few table operations. Not recursive; a fork child starts with it free (vgpu_spin_init). */
typedef struct {
    int held;
} vgpu_spin;
#define VGPU_SPIN_INIT {0}
__attribute__((noinline, cold, unused)) static void vgpu_spin_wait(vgpu_spin *l) /* the contended path: out of line */
{
    do {
        while (__atomic_load_n(&l->held, __ATOMIC_RELAXED))
            sched_yield();
    } while (__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE));
}
static inline void vgpu_spin_lock(vgpu_spin *l)
{
    if (__builtin_expect(__atomic_exchange_n(&l->held, 1, __ATOMIC_ACQUIRE), 0))
        vgpu_spin_wait(l);
}
static inline void vgpu_spin_unlock(vgpu_spin *l)
{
    __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE);
}
static inline void vgpu_spin_init(vgpu_spin *l)
{
    __atomic_store_n(&l->held, 0, __ATOMIC_RELEASE);
}

/* ---- numbers ---- */
/* A decimal integer as the C library's strtol with base 10 reads it: blanks, an optional sign,
 * digits; *end (when given) is set after the last digit, or to text when there is none; saturates
 * rather than overflows. Not strtol or atoi themselves: built against glibc 2.38 or later they bind
 * to GLIBC_2.38 symbols, and containers with an older C library could not load libvgpu
 * (tests/check-glibc.sh). */
static inline long long vgpu_decimal(const char *text, char **end)
{
    const char *p = text;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
        p++;
    int negative = *p == '-';
    if (*p == '+' || *p == '-')
        p++;
    if (*p < '0' || *p > '9') {
        if (end)
            *end = (char *)(uintptr_t)text;
        return 0;
    }
    unsigned long long value = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        value = value > (ULLONG_MAX - 9) / 10 ? ULLONG_MAX : value * 10 + (unsigned)(*p - '0');
    if (end)
        *end = (char *)(uintptr_t)p;
    if (value > (unsigned long long)LLONG_MAX)
        return negative ? LLONG_MIN : LLONG_MAX;
    return negative ? -(long long)value : (long long)value;
}

/* ---- configuration (config.c) ---- */
struct vgpu_config {
    uint64_t limit[VGPU_MAX_DEVICES]; /* bytes, 0 = no quota on that device */
    int limit_enforce;                /* LIMIT */
    int virtual_memory;               /* GPU_VIRTUAL_MEMORY */
    int cgroup_enable;                /* GPU_CGROUP_ENABLE */
    int cgroup_map_mode;              /* CGROUP_MAP_MODE */
    int compute_audit;                /* GPU_COMPUTE_AUDIT */
    uint64_t ctx_reserve;             /* bytes charged per CUDA context */
    char region_dir[512];
    int region_dir_explicit;          /* the folder must be usable: the contract's, or VGPU_REGION_DIR */
    char source[600];                 /* where the quota came from, for messages */
};

VGPU_HIDDEN int vgpu_parse_size(const char *text, uint64_t *bytes);
VGPU_HIDDEN int vgpu_parse_limits(const char *text, uint64_t out[VGPU_MAX_DEVICES], char *err, size_t errlen);
VGPU_HIDDEN int vgpu_config_load(struct vgpu_config *cfg, char *err, size_t errlen);
/* Whether the device plugin's quota file is present (or there but unreadable): then it is the
 * whole configuration and no environment variable overrides anything (issue 38). */
VGPU_HIDDEN int vgpu_config_contract(void);
/* The region folder: the contract's when the device plugin's quota file is present (returns 1),
 * else VGPU_REGION_DIR or the contract's default; *explicit_dir when it must be usable. */
VGPU_HIDDEN int vgpu_config_region_dir(char *out, size_t len, int *explicit_dir);
VGPU_HIDDEN uint32_t vgpu_config_flags(const struct vgpu_config *cfg);

/* ---- logging (log.c) ---- */
VGPU_HIDDEN void vgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define VGPU_ERR 0
#define VGPU_WARN 1
#define VGPU_INFO 2
#define VGPU_DEBUG 3

/* ---- process identity (proc.c; also built into the fake driver) ---- */
/* A process is its pid and its start time (field 22 of /proc/<pid>/stat, the same in every pid
 * namespace): a reused pid is another process. vgpu_proc_start_time is 0 when it is gone or a
 * zombie. */
VGPU_HIDDEN uint64_t vgpu_proc_start_time(int pid);
/* Alive with that start time (0: any) and, when cgroup is given and not empty, in that cgroup. */
VGPU_HIDDEN int vgpu_proc_alive(int pid, uint64_t start_time, const char *cgroup);
/* The contents of /proc/<pid>/cgroup (empty when unreadable), NUL-terminated within len. */
VGPU_HIDDEN void vgpu_proc_cgroup(int pid, char *out, size_t len);

/* ---- finding the real driver libraries (loader.c) ---- */
VGPU_HIDDEN void *vgpu_open_real(const char *soname, const char *override_env, char *err, size_t errlen);

/* ---- what this process charged (track.c) ---- */
enum vgpu_kind {
    VGPU_K_PTR = 1, /* linear memory by address (stream-ordered allocations: track_async.c) */
    VGPU_K_HANDLE,  /* a physical handle (refs: cuMemCreate + retains, maps: live mappings) */
    VGPU_K_ARRAY,
    VGPU_K_MIPMAP,
    VGPU_K_CTX,     /* a context, charged its measured cost */
    VGPU_K_MAP,     /* a mapping of a charged handle by address (bytes: its size, aux: the handle) */
    VGPU_K_MODULE,  /* a module's measured cost (aux: the context it belongs to) */
    VGPU_K_LIBRARY, /* a library's measured costs (aux: the context; flags: lookups measured) */
    VGPU_K_KERNEL,  /* a library's kernel (aux: the library); no charge */
    VGPU_K_LIMIT,   /* a context limit's measured cost (key: context | limit, aux: the context) */
};
#define VGPU_F_PINNED 1u        /* exported or bound: charged until the process exits */
#define VGPU_F_KERNEL_SEEN 2u   /* a library's first kernel lookup was measured */
#define VGPU_F_RESIDENT 4u      /* a library's module lookup was measured: it is loaded */
#define VGPU_F_UNDONE 8u        /* a library libvgpu unloaded because it did not fit */
#define VGPU_F_PENDING 16u      /* a limit charged that the driver has not taken yet (the device heap) */
struct vgpu_track_entry {
    uint64_t key;
    uint64_t bytes;
    uint64_t aux;
    int32_t dev;
    int32_t kind; /* 0 = empty slot in the table */
    uint32_t refs, maps, flags, pad;
};
/* 0 = added, 1 = replaced a stale entry (old_* filled), -1 = out of memory */
VGPU_HIDDEN int vgpu_track_put(int kind, uint64_t key, uint64_t bytes, int dev, uint64_t *old_bytes, int *old_dev);
VGPU_HIDDEN int vgpu_track_put_entry(const struct vgpu_track_entry *e, struct vgpu_track_entry *old);
VGPU_HIDDEN int vgpu_track_take(int kind, uint64_t key, uint64_t *bytes, int *dev);
VGPU_HIDDEN int vgpu_track_take_entry(int kind, uint64_t key, struct vgpu_track_entry *out);
/* Run fn on entry (kind, key) under the table's lock; when fn returns 1 the entry is taken out.
 * The entry as fn left it is copied to *out. -1 when there is no such entry, else fn's result. */
VGPU_HIDDEN int vgpu_track_with(int kind, uint64_t key, int (*fn)(struct vgpu_track_entry *, void *), void *arg,
                                struct vgpu_track_entry *out);
/* Take out every entry of kind for which pick returns 1, calling done on each (outside the lock). */
VGPU_HIDDEN void vgpu_track_drain(int kind, int (*pick)(const struct vgpu_track_entry *, void *), void *arg,
                                  void (*done)(const struct vgpu_track_entry *, void *));
/* The first entry of kind for which pick returns 1, copied to *out: 0, or -1 when none. */
VGPU_HIDDEN int vgpu_track_find(int kind, int (*pick)(const struct vgpu_track_entry *, void *), void *arg,
                                struct vgpu_track_entry *out);

/* ---- stream-ordered allocations (track_async.c) ---- */
/* Their own table, by pointer, with no lock shared by all threads: what a free needs. */
struct vgpu_async_entry {
    uint64_t key;   /* the pointer; never 0 */
    uint64_t bytes; /* charged to the pool's live count */
    uint64_t pool;  /* the pool's handle */
    int32_t dev;
    uint32_t record; /* the pool's record + 1 (cuda_pools.c) */
};
/* 0 = added, 1 = replaced a stale entry (*old filled), -1 = out of memory or key 0 */
VGPU_HIDDEN int vgpu_async_put(const struct vgpu_async_entry *e, struct vgpu_async_entry *old);
/* 0 and *out taken out of the table, or -1 when key is not in it. */
VGPU_HIDDEN int vgpu_async_take(uint64_t key, struct vgpu_async_entry *out);

/* In libvgpu.so our own exported dlsym is the hook: internal lookups must use the real one. */
#ifdef VGPU_PRELOAD
VGPU_HIDDEN void *vgpu_real_dlsym(void *handle, const char *name);
#define dlsym vgpu_real_dlsym
#endif

#endif
