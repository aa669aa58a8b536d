/* What the fake CUDA driver and the fake NVML share: the fake GPUs' configuration and the
 * optional node-wide state file (see tests/README.md, "The fake driver"). */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_MAX_GPUS 16
#define FAKE_MAX_PROCS 256
#define FAKE_STATE_MAGIC 0x4554415453555047ULL /* "GPUSTATE" */
#ifndef FAKE_GPU_CONF
#define FAKE_GPU_CONF "/etc/vgpu-fake-gpu.conf"
#endif

struct fake_config {
    int ok;                        /* 0: err says what is wrong */
    char err[700];
    int gpus;                      /* physical fake GPUs on the node */
    uint64_t total_bytes;          /* memory of each */
    char state_path[512];          /* node-wide state file, "" = none (each process alone) */
    char name[64];                 /* the GPUs' model, as CUDA and NVML name it */
    int nvisible;                  /* GPUs this process may use (NVIDIA_VISIBLE_DEVICES) */
    int visible[FAKE_MAX_GPUS];    /* their physical indexes */
};

/* One process that holds fake GPU memory (pid as its own pid namespace sees it). Its memory
 * lives as long as it or a process it forked (an heir: it holds the driver's file descriptors)
 * does, as with the driver: NVML lists it under the pid of the process that took it. */
#define FAKE_HEIRS 8
struct fake_proc {
    uint32_t pid;
    uint32_t live;
    uint64_t pidns;      /* inode of /proc/self/ns/pid */
    uint64_t start_time; /* field 22 of /proc/<pid>/stat: the same in every namespace */
    uint64_t bytes[FAKE_MAX_GPUS];
    uint32_t contexts[FAKE_MAX_GPUS]; /* NVML lists a process that has a context, whatever it holds */
    uint32_t heir_pid[FAKE_HEIRS];    /* forked processes that hold its file descriptors (same namespace) */
    uint64_t heir_start[FAKE_HEIRS];
};

/* The node-wide state: what every process of the node holds on every fake GPU. now and peak
 * (all GPUs) stay at offsets 0 and 8, where tests read them with od. */
struct fake_state {
    uint64_t now, peak;
    uint64_t magic;
    uint32_t gpus, reserved;
    uint64_t used[FAKE_MAX_GPUS];
    uint32_t compute_mode[FAKE_MAX_GPUS];
    union {
        pthread_mutex_t mutex; /* process-shared, robust */
        char pad[64];
    } lock;
    struct fake_proc procs[FAKE_MAX_PROCS];
};

__attribute__((visibility("hidden"))) const struct fake_config *fake_config(void);
__attribute__((visibility("hidden"))) void fake_uuid(int phys, unsigned char out[16]);
__attribute__((visibility("hidden"))) void fake_uuid_text(int phys, char *out, size_t len);
/* The mapped state file, or NULL when none is configured (or it cannot be used: logged). */
__attribute__((visibility("hidden"))) struct fake_state *fake_state(void);
__attribute__((visibility("hidden"))) void fake_state_lock(struct fake_state *s);
__attribute__((visibility("hidden"))) void fake_state_unlock(struct fake_state *s);
/* Free what dead processes held once no heir of theirs lives (the real driver does it when the
 * last holder of its file descriptors exits); caller holds the lock. */
__attribute__((visibility("hidden"))) void fake_state_reap_locked(struct fake_state *s);
/* The pid of an entry as this process's pid namespace sees it; 0 = not visible from here. */
__attribute__((visibility("hidden"))) uint32_t fake_proc_local_pid(const struct fake_proc *p);
__attribute__((visibility("hidden"))) uint64_t fake_self_pidns(void);
__attribute__((visibility("hidden"))) uint64_t fake_start_time(uint32_t pid);
/* In a fork child: it holds the file descriptors of entry p (its parent's, or what its parent
 * inherited), so p's memory lives while it does. Caller holds the lock. */
__attribute__((visibility("hidden"))) void fake_state_add_heir_locked(struct fake_proc *p);
#endif
