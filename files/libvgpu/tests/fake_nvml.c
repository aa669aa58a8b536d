/* A fake NVML for the CI tests and for GPU-less nodes: the fake GPUs of fake_gpu.c (the same
 * UUIDs as the fake CUDA driver's), the calls libvgpu's NVML hooks and the Python components
 * (pynvml: device plugin, cgpu-monitor, MPS, gpu_facts) make. The running-process list is the
 * GPU's own per-process count, as the driver's: everything the fake CUDA driver took for each
 * process (allocations, pool reserves, physical handles, contexts, modules, stacks). Without a
 * state file that is the caller alone (found in this process's fake libcuda) and the device
 * shows 100 MiB used by someone else; with one, every process of the node, pids as this
 * process's pid namespace sees them. FAKE_NVML_PROCS=0 lists no process (as MPS hides its
 * clients). Devices are those of NVIDIA_VISIBLE_DEVICES, numbered from 0. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "abi.h"
#include "fake_gpu.h"

#define EXPORT __attribute__((visibility("default")))
#define NVML_ERROR_TIMEOUT 10

static int inits;
static struct nvmlDevice_st {
    int index; /* as NVML numbers it in this process */
    int phys;  /* the fake GPU */
} devs[FAKE_MAX_GPUS];
static int ndevs;
static unsigned local_mode[FAKE_MAX_GPUS]; /* compute modes without a state file */

static nvmlReturn_t init(void)
{
    const struct fake_config *c = fake_config();
    if (!c->ok)
        return NVML_ERROR_UNKNOWN;
    ndevs = c->nvisible;
    for (int i = 0; i < ndevs; i++)
        devs[i] = (struct nvmlDevice_st){i, c->visible[i]};
    __atomic_add_fetch(&inits, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return init();
}
EXPORT nvmlReturn_t nvmlInit(void)
{
    return init();
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
    (void)flags;
    return init();
}
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    __atomic_sub_fetch(&inits, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}
EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    default:
        return "Fake NVML error";
    }
}

static int valid(nvmlDevice_t d)
{
    return inits && d >= devs && d < devs + ndevs;
}
#define CHECK_DEVICE(d)                                                                                               \
    do {                                                                                                              \
        if (!inits)                                                                                                   \
            return NVML_ERROR_UNINITIALIZED;                                                                          \
        if (!valid(d))                                                                                                \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                       \
    } while (0)

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    if (!buf || len < 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(buf, len, "999.1.2");
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned len)
{
    if (!buf || len < 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(buf, len, "13.999.1.2");
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = 13000;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return nvmlSystemGetCudaDriverVersion(v);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned)ndevs;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *n)
{
    return nvmlDeviceGetCount_v2(n);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (i >= (unsigned)ndevs || !d)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devs[i];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d)
{
    return nvmlDeviceGetHandleByIndex_v2(i, d);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !d)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ndevs; i++) {
        char u[64];
        fake_uuid_text(devs[i].phys, u, sizeof u);
        if (strcmp(u, uuid) == 0) {
            *d = &devs[i];
            return NVML_SUCCESS;
        }
    }
    return 6; /* NVML_ERROR_NOT_FOUND */
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
    CHECK_DEVICE(d);
    if (!i)
        return NVML_ERROR_INVALID_ARGUMENT;
    *i = (unsigned)d->index;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *minor)
{
    CHECK_DEVICE(d);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)d->phys; /* /dev/nvidia<minor> on the node */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len)
{
    CHECK_DEVICE(d);
    if (!buf || len < 41)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_uuid_text(d->phys, buf, len);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len)
{
    CHECK_DEVICE(d);
    if (!buf || len < 16)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(buf, len, "%s", fake_config()->name);
    return NVML_SUCCESS;
}
/* nvmlPciInfo_t: busIdLegacy[16], domain, bus, device, pciDeviceId, pciSubSystemId, busId[32] */
struct fake_pci {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, struct fake_pci *pci)
{
    CHECK_DEVICE(d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10u + (unsigned)d->phys;
    pci->pci_device_id = 0x233510deu;
    snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "0000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, struct fake_pci *pci)
{
    return nvmlDeviceGetPciInfo_v3(d, pci);
}
EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned *mode)
{
    CHECK_DEVICE(d);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending)
{
    (void)current, (void)pending;
    CHECK_DEVICE(d);
    return NVML_ERROR_NOT_SUPPORTED; /* like a GPU without MIG */
}

/* ---- compute mode: node-wide with a state file ---- */
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, unsigned *mode)
{
    CHECK_DEVICE(d);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_state *s = fake_state();
    *mode = s ? __atomic_load_n(&s->compute_mode[d->phys], __ATOMIC_RELAXED) : local_mode[d->phys];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, unsigned mode)
{
    CHECK_DEVICE(d);
    if (mode > 3 || mode == 1)
        return NVML_ERROR_INVALID_ARGUMENT; /* 1 (exclusive thread) is gone since CUDA 8 */
    struct fake_state *s = fake_state();
    if (s)
        __atomic_store_n(&s->compute_mode[d->phys], mode, __ATOMIC_RELAXED);
    else
        local_mode[d->phys] = mode;
    return NVML_SUCCESS;
}

/* ---- memory ---- */
static unsigned long long total(void)
{
    return fake_config()->total_bytes;
}
/* (used, reserved) of a device: the node's allocations with a state file, else the fixed figures */
static void usage(nvmlDevice_t d, unsigned long long *used, unsigned long long *reserved)
{
    struct fake_state *s = fake_state();
    if (s) {
        fake_state_lock(s);
        fake_state_reap_locked(s);
        *used = s->used[d->phys];
        fake_state_unlock(s);
        *reserved = 0;
    } else {
        *used = 100ULL << 20;
        *reserved = 300ULL << 20;
    }
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    CHECK_DEVICE(d);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long reserved;
    m->total = total();
    usage(d, &m->used, &reserved);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    CHECK_DEVICE(d);
    if (!m || m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | 2u << 24))
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = total();
    usage(d, &m->used, &m->reserved);
    m->free = m->total - m->used - m->reserved;
    return NVML_SUCCESS;
}

/* ---- running processes: nvmlProcessInfo_v1_t {pid, usedGpuMemory} (16 bytes), v2/v3 add the
 * GPU and compute instance ids (24 bytes); too small a buffer gets INSUFFICIENT_SIZE and the count. */
struct proc_row {
    unsigned pid;
    unsigned long long bytes;
};
/* The fake libcuda loaded in this process (by the loader or by libvgpu, RTLD_LOCAL): found by
 * walking the loaded objects for its fake_gpu_self_bytes. */
struct self_lookup {
    const char *name;
    void *fn;
};
static int find_in_objects(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct self_lookup *l = arg;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    l->fn = h ? dlsym(h, l->name) : NULL;
    if (h)
        dlclose(h);
    return l->fn != NULL;
}

/* This process in the fake libcuda: (bytes it holds, contexts it has) on fake GPU phys. */
static uint64_t self_in_fake(int phys, uint32_t *contexts)
{
    struct self_lookup bytes = {"fake_gpu_self_bytes", NULL}, ctxs = {"fake_gpu_self_contexts", NULL};
    dl_iterate_phdr(find_in_objects, &bytes);
    dl_iterate_phdr(find_in_objects, &ctxs);
    *contexts = ctxs.fn ? ((uint32_t(*)(int))ctxs.fn)(phys) : 0;
    return bytes.fn ? ((uint64_t(*)(int))bytes.fn)(phys) : 0;
}

static unsigned rows_of(nvmlDevice_t d, struct proc_row *rows, unsigned max)
{
    struct fake_state *s = fake_state();
    unsigned n = 0;
    const char *shown = getenv("FAKE_NVML_PROCS");
    if (shown && strcmp(shown, "0") == 0)
        return 0;
    if (!s) {
        uint32_t contexts;
        uint64_t mine = self_in_fake(d->phys, &contexts);
        if ((mine || contexts) && max)
            rows[n++] = (struct proc_row){(unsigned)getpid(), mine};
        return n;
    }
    fake_state_lock(s);
    fake_state_reap_locked(s);
    for (int i = 0; i < FAKE_MAX_PROCS && n < max; i++) {
        const struct fake_proc *p = &s->procs[i];
        uint32_t pid = p->live && (p->bytes[d->phys] || p->contexts[d->phys]) ? fake_proc_local_pid(p) : 0;
        if (pid)
            rows[n++] = (struct proc_row){pid, p->bytes[d->phys]};
    }
    fake_state_unlock(s);
    return n;
}
static nvmlReturn_t running(nvmlDevice_t d, unsigned *count, void *infos, size_t stride)
{
    CHECK_DEVICE(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct proc_row rows[FAKE_MAX_PROCS];
    unsigned n = rows_of(d, rows, FAKE_MAX_PROCS);
    if (n > *count || (n && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memset(infos, 0, stride * n);
    for (unsigned i = 0; i < n; i++) {
        memcpy((char *)infos + i * stride, &rows[i].pid, sizeof rows[i].pid);
        memcpy((char *)infos + i * stride + 8, &rows[i].bytes, sizeof rows[i].bytes);
        if (stride == 24)
            memset((char *)infos + i * stride + 16, 0xff, 8); /* no MIG: instance ids 0xFFFFFFFF */
    }
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned *count, void *infos)
{
    return running(d, count, infos, 16);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *infos)
{
    return running(d, count, infos, 24);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *infos)
{
    return running(d, count, infos, 24);
}

/* ---- events: registration works, and a fake GPU never reports an Xid: waits time out ---- */
static struct nvmlEventSet_st {
    int live;
} sets[64];
EXPORT nvmlReturn_t nvmlEventSetCreate(struct nvmlEventSet_st **set)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    for (int i = 0; set && i < 64; i++)
        if (!__atomic_exchange_n(&sets[i].live, 1, __ATOMIC_SEQ_CST)) {
            *set = &sets[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INVALID_ARGUMENT;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
    CHECK_DEVICE(d);
    if (!types)
        return NVML_ERROR_INVALID_ARGUMENT;
    *types = 0x8; /* nvmlEventTypeXidCriticalError */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, struct nvmlEventSet_st *set)
{
    CHECK_DEVICE(d);
    if (!set || !set->live || (types & ~0x8ULL))
        return types & ~0x8ULL ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct nvmlEventSet_st *set, void *data, unsigned timeout_ms)
{
    if (!set || !set->live || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return NVML_ERROR_TIMEOUT;
}
EXPORT nvmlReturn_t nvmlEventSetWait(struct nvmlEventSet_st *set, void *data, unsigned timeout_ms)
{
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}
EXPORT nvmlReturn_t nvmlEventSetFree(struct nvmlEventSet_st *set)
{
    if (!set || !__atomic_exchange_n(&set->live, 0, __ATOMIC_SEQ_CST))
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
