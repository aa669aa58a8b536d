/* The shared accounting region: layout documented byte by byte in docs/region-format.md. */
#ifndef VGPU_REGION_H
#define VGPU_REGION_H

#include <pthread.h>
#include <stdint.h>

#include "vgpu.h"

#define VGPU_REGION_MAGIC 0x55504756u /* "VGPU" little-endian */
#define VGPU_REGION_VERSION 1u
#define VGPU_REGION_FILE "vgpu.region"
#define VGPU_HEADER_SIZE 4096u
#define VGPU_DEVICE_SIZE 128u
#define VGPU_SLOT_SIZE 1024u
#define VGPU_MAX_SLOTS 1024u
#define VGPU_REGION_SIZE (VGPU_HEADER_SIZE + VGPU_SLOT_SIZE * VGPU_MAX_SLOTS)

struct vgpu_region_device {
    uint64_t limit_bytes;
    uint64_t used_bytes;
    uint64_t ctx_bytes;
    uint64_t peak_bytes;
    uint64_t live_buffers;
    uint64_t peak_buffers;
    uint64_t alloc_count;
    uint64_t free_count;
    uint64_t bytes_allocated;
    uint64_t bytes_freed;
    uint64_t reclaimed_buffers;
    uint64_t reclaimed_bytes;
    uint8_t uuid[16];
    uint32_t uuid_valid;
    uint32_t oom_count;
    uint64_t reserved;
};

/* What the GPU said (NVML, per process) at the last check of a device, and how far the ledger
 * has moved since (design.md, "The invariant"). */
struct vgpu_region_truth {
    uint64_t nvml_bytes;      /* the container's live processes summed, as NVML said */
    uint64_t excess_bytes;    /* how much that was above the ledger: held where no hook sees */
    uint64_t admitted_bytes;  /* admitted since the check */
    uint64_t checked_ns;      /* CLOCK_REALTIME of the check; 0 = never */
};

/* A process that exited with memory on a device: its slot is gone (the container's totals no
 * longer show it) but the driver frees the memory only when the process is gone, after its
 * destructors. Admission counts it while the process lives. */
#define VGPU_MAX_EXITS 16
struct vgpu_region_exit {
    uint32_t pid; /* 0 = free entry */
    int32_t dev;
    uint64_t start_time;
    uint64_t bytes;
};

struct vgpu_region_header {
    uint32_t magic;
    uint32_t version;
    uint32_t header_size;
    uint32_t device_size;
    uint32_t max_devices;
    uint32_t slot_size;
    uint32_t max_slots;
    uint32_t state;
    uint64_t file_size;
    uint64_t seq;
    uint64_t created_ns;
    uint32_t flags;
    uint32_t device_count;
    uint64_t ctx_reserve_bytes;
    uint64_t updated_ns;
    uint32_t lock_owner_pid;
    uint32_t reset_count;
    uint32_t slot_high;      /* slots at and above are free */
    uint32_t restored_count; /* times a process found the region below what it holds, and restored it */
    uint8_t reserved1[32];
    union {
        pthread_mutex_t mutex;
        uint8_t pad[64];
    } lock;
    char cgroup[256];
    struct vgpu_region_exit exits[VGPU_MAX_EXITS];
    uint8_t reserved2[192];
    struct vgpu_region_device devices[VGPU_MAX_DEVICES];
    struct vgpu_region_truth truth[VGPU_MAX_DEVICES];
    uint8_t reserved3[512];
};

struct vgpu_slot_device {
    uint64_t used_bytes;
    uint64_t ctx_bytes;
    uint64_t peak_bytes;
    uint64_t buffers;
};

struct vgpu_region_slot {
    uint32_t pid;
    uint32_t state;
    uint64_t start_time;
    uint64_t attach_ns;
    uint64_t launches;
    uint64_t gpu_time_ns;
    char comm[16];
    uint8_t reserved1[8];
    struct vgpu_slot_device devices[VGPU_MAX_DEVICES];
    uint64_t nvml_bytes[VGPU_MAX_DEVICES]; /* what NVML said this process held, per device, at nvml_ns */
    uint64_t nvml_ns;                      /* CLOCK_REALTIME of that check; 0 = never */
    /* A process forked from one holding GPU memory holds the driver's file descriptors too, so
     * that memory lives as long as it does: the process it inherited them from (0 = none). */
    uint32_t heir_of_pid;
    uint32_t reserved3;
    uint64_t heir_of_start;
    /* Charged to this process but not yet taken by the driver (a device heap set, before the
     * first launch of a kernel that calls malloc): the GPU's count does not show it yet, so
     * admission adds it to that count (design.md, "The invariant"). */
    uint64_t pending_bytes[VGPU_MAX_DEVICES];
    uint8_t reserved2[168];
};

struct vgpu_region {
    struct vgpu_region_header hdr;
    struct vgpu_region_slot slots[VGPU_MAX_SLOTS];
};

_Static_assert(sizeof(struct vgpu_region_device) == VGPU_DEVICE_SIZE, "device record size");
_Static_assert(sizeof(struct vgpu_region_truth) == 32, "truth record size");
_Static_assert(sizeof(struct vgpu_region_exit) == 24, "exit record size");
_Static_assert(sizeof(struct vgpu_region_header) == VGPU_HEADER_SIZE, "header size");
_Static_assert(sizeof(struct vgpu_region_slot) == VGPU_SLOT_SIZE, "slot size");
_Static_assert(sizeof(struct vgpu_region) == VGPU_REGION_SIZE, "region size");
_Static_assert(sizeof(pthread_mutex_t) <= 64, "pthread_mutex_t fits its 64 bytes");

enum vgpu_charge_kind { VGPU_DATA = 0, VGPU_CTX = 1, VGPU_ROLLBACK = 2 };

/* Open a region file for reading and writing: never through a symbolic link, never blocking
 * (a FIFO), a regular file with one link only; creates it when create. fd, or -1 and err. */
VGPU_HIDDEN int vgpu_region_open(const char *path, int create, char *err, size_t errlen);
/* Map (creating if needed) <dir>/vgpu.region; private anonymous memory when dir is not usable
 * and not explicit. Returns NULL and fills err on failure. */
VGPU_HIDDEN struct vgpu_region *vgpu_region_map(const char *dir, int explicit_dir, int create, char *err, size_t errlen);
VGPU_HIDDEN struct vgpu_region *vgpu_region_map_file(const char *path, int create, char *err, size_t errlen);

/* Lock with robust-owner recovery; every mutation runs between lock and unlock. */
VGPU_HIDDEN void vgpu_region_lock(struct vgpu_region *r);
VGPU_HIDDEN void vgpu_region_unlock(struct vgpu_region *r);

/* Take the lock, waiting at most seconds for a live holder (a stopped process, say), then
 * rebuild the lock (1 returned; the caller recomputes). Tools only: the hooks never time out. */
VGPU_HIDDEN int vgpu_region_lock_timed(struct vgpu_region *r, unsigned seconds);

/* In a fork child: take a slot for this process that says whose memory it keeps alive (the
 * parent's, in parent_slot, or what the parent itself inherited), so that memory counts until
 * this process is gone. The slot index, or -1 (the parent had none, or the region is full). */
VGPU_HIDDEN int vgpu_region_fork_child(struct vgpu_region *r, int parent_slot);
/* Register this process (slot), write limits and switches; reclaims dead slots. -1 if full. */
VGPU_HIDDEN int vgpu_region_attach(struct vgpu_region *r, const struct vgpu_config *cfg);
VGPU_HIDDEN void vgpu_region_detach(struct vgpu_region *r, int slot);

/* The GPU's own per-process count of one device (NVML), read by the CUDA side (truth.c). */
#define VGPU_TRUTH_ROWS 512
struct vgpu_truth {
    unsigned n;
    uint32_t pid[VGPU_TRUTH_ROWS];
    uint64_t bytes[VGPU_TRUTH_ROWS];
    uint64_t ns; /* CLOCK_REALTIME when read */
};

/* How a rise is admitted (design.md, "The invariant"). Far from the limit the ledger alone
 * decides. When the ledger, plus what the last check found held beyond it, comes within
 * allowance of the limit, or allowance / 2 was admitted since that check, the GPU's own count is
 * needed: without truth (and final 0) the call returns 1 and changes nothing; the caller reads
 * NVML outside the lock and calls again with it. With truth the rise is admitted only if
 * max(ledger, the container's processes summed) + bytes fits (held: the truth already has the
 * bytes, as after a measured call). final: a refusal is the last word (counted); truth NULL then
 * means NVML cannot tell, and the ledger decides. */
struct vgpu_limit {
    uint64_t limit; /* 0 = no quota */
    int enforce;
    uint64_t allowance;
    const struct vgpu_truth *truth;
    int held;
    int final;
};

/* Charge bytes to slot/device: 0 ok, -1 refused, 1 the GPU's count is needed (see above). */
VGPU_HIDDEN int vgpu_region_charge(struct vgpu_region *r, int *slot, int dev, int kind, uint64_t bytes,
                                   const struct vgpu_limit *lim);
VGPU_HIDDEN void vgpu_region_uncharge(struct vgpu_region *r, int *slot, int dev, int kind, uint64_t bytes);
/* Move this process's used memory on dev by bytes and its live allocations by buffers (graph
 * and pool memory: charged per graph or pool, not per buffer). A rise is admitted like a charge
 * (lim NULL: not checked): 0 ok, -1 refused, 1 truth needed. A fall never goes below what it holds. */
VGPU_HIDDEN int vgpu_region_adjust(struct vgpu_region *r, int *slot, int dev, int64_t bytes, int64_t buffers,
                                   const struct vgpu_limit *lim);
/* Move this process's pending bytes on dev (charged, not yet taken by the driver) by delta. */
VGPU_HIDDEN void vgpu_region_pending(struct vgpu_region *r, int *slot, int dev, int64_t delta);
/* What this process has pending on dev (lock-free). */
VGPU_HIDDEN uint64_t vgpu_region_own_pending(int dev);
/* This process's own count on dev (used + contexts), for measuring a call against NVML. */
VGPU_HIDDEN uint64_t vgpu_region_own_bytes(int dev);
/* Live slots' pids (the container's processes), lock-free; returns how many (at most max). */
VGPU_HIDDEN unsigned vgpu_region_pids(const struct vgpu_region *r, uint32_t *pids, unsigned max);

/* Record the UUID of CUDA ordinal dev (NVML maps its devices to ordinals by it). */
VGPU_HIDDEN void vgpu_region_record_uuid(struct vgpu_region *r, int dev, const uint8_t uuid[16]);
/* Test aid: hold the lock in the middle of an update (sequence odd) for seconds; started() is
 * called once the update has begun. */
VGPU_HIDDEN void vgpu_region_stall_in_update(struct vgpu_region *r, unsigned seconds, void (*started)(void));

/* Reclaim slots of processes that are gone; caller holds the lock. Returns slots reclaimed. */
VGPU_HIDDEN int vgpu_region_sweep_locked(struct vgpu_region *r);
/* Recompute device totals from live slots; caller holds the lock. */
VGPU_HIDDEN void vgpu_region_recompute_locked(struct vgpu_region *r);
/* Clear garbage slots, reclaim dead ones, recompute the totals (manage --reset); caller holds the lock. */
VGPU_HIDDEN void vgpu_region_repair_locked(struct vgpu_region *r, int *bad, int *dead);
VGPU_HIDDEN void vgpu_region_init_header(struct vgpu_region *r);
/* (Re)initialise the region's lock as a robust, process-shared mutex, unlocked. */
VGPU_HIDDEN void vgpu_region_init_lock(struct vgpu_region *r);

VGPU_HIDDEN int vgpu_region_header_valid(const struct vgpu_region *r);

/* Consistent lock-free copy of the header; 0 ok, -1 gave up. */
VGPU_HIDDEN int vgpu_region_sample(const struct vgpu_region *r, struct vgpu_region_header *out);

#endif
