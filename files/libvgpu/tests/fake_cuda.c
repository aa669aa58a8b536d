/* A fake CUDA driver for the CI tests and for GPU-less nodes (there is no GPU there): host memory
 * behind the driver-shaped API that libvgpu hooks. FAKE_GPUS GPUs (default 1) of FAKE_TOTAL_MIB
 * MiB each (default 8192), or as /etc/vgpu-fake-gpu.conf says (tests/README.md); a GPU refuses
 * allocations past its memory with CUDA_ERROR_OUT_OF_MEMORY. Without a state file each process
 * has the GPUs to itself; with one (state=, FAKE_STATE) every process of the node shares them.
 * Fake NVML reports what each process holds: everything this file and fake_memory.c,
 * fake_modules.c and fake_graphs.c take, with the lifetimes the real driver has (contexts cost
 * FAKE_CTX_MIB, modules their .global arrays, pools keep freed memory, ...: tests/README.md).
 * CUDA_VISIBLE_DEVICES (indexes or UUIDs) and NVIDIA_VISIBLE_DEVICES are honoured as the driver
 * and the container runtime do. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_gpu.h"

static int initialised;
static const struct fake_config *cfg;
static struct fake_state *state;
static int ndev;                     /* CUDA ordinals of this process */
static int phys_of[FAKE_MAX_GPUS];   /* ordinal -> physical fake GPU */
static uint64_t used[FAKE_MAX_GPUS]; /* this process's device memory, by ordinal */
static struct fake_proc *me;         /* our entry in the state, NULL = none */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static struct CUctx_st primary_ctx[FAKE_MAX_GPUS], extra_ctx[64];
static unsigned primary_refs[FAKE_MAX_GPUS];
static __thread CUcontext current;

/* Linear memory, arrays and IPC mappings. A block of a context (cuMemAlloc and its kin) goes
 * with the context; charged is the device memory it takes (its size rounded up to
 * FAKE_ALLOC_ROUND_MIB, as a real GPU rounds small allocations up to its pages). */
struct block {
    uint64_t key, bytes, charged;
    void *mem;
    int dev;       /* the ordinal of device memory, -1 = host memory */
    CUcontext ctx; /* the context it belongs to, NULL = none */
};
static struct block blocks[65536];
static uint64_t next_handle = 0x1000;

uint64_t fake_env_number(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end ? def : (uint64_t)n;
}

uint64_t fake_env_bytes(const char *name, uint64_t def_mib)
{
    return fake_env_number(name, def_mib) * FAKE_MIB;
}

/* CUDA_VISIBLE_DEVICES: indexes into the GPUs the process has, or UUIDs (a prefix is enough);
 * the list ends at the first entry that names no GPU or one already listed, as with the driver. */
static void map_ordinals(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    ndev = 0;
    if (!v) {
        for (int i = 0; i < cfg->nvisible; i++)
            phys_of[ndev++] = cfg->visible[i];
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    int taken[FAKE_MAX_GPUS] = {0};
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && ndev < FAKE_MAX_GPUS;
         item = strtok_r(NULL, ",", &save)) {
        int k = -1;
        char *end;
        long idx = strtol(item, &end, 10);
        if (end != item && !*end)
            k = idx >= 0 && idx < cfg->nvisible ? (int)idx : -1;
        else
            for (int i = 0; i < cfg->nvisible && k < 0; i++) {
                char u[64];
                fake_uuid_text(cfg->visible[i], u, sizeof u);
                if (strncmp(u, item, strlen(item)) == 0 && strlen(item) >= 8)
                    k = i;
            }
        if (k < 0 || taken[k])
            break;
        taken[k] = 1;
        phys_of[ndev++] = cfg->visible[k];
    }
}

static int valid_dev(CUdevice d)
{
    return d >= 0 && d < ndev;
}

static int current_dev(void)
{
    return current ? current->dev : -1;
}

int fake_ready(void)
{
    return initialised;
}
int fake_current_dev(void)
{
    return current_dev();
}
CUcontext fake_current_ctx(void)
{
    return current;
}
int fake_valid_dev(int dev)
{
    return valid_dev(dev);
}

/* Our entry in the node-wide state (state lock held). */
static struct fake_proc *my_entry_locked(void)
{
    uint32_t pid = (uint32_t)getpid();
    if (me && me->live && me->pid == pid)
        return me;
    uint64_t ns = fake_self_pidns(), start = fake_start_time(pid);
    me = NULL;
    for (int i = 0; i < FAKE_MAX_PROCS && !me; i++)
        if (!state->procs[i].live) {
            me = &state->procs[i];
            *me = (struct fake_proc){.pid = pid, .live = 1, .pidns = ns, .start_time = start};
        }
    return me;
}

/* Take bytes of device memory on ordinal dev from the GPU: its whole memory is shared by every
 * process of the node when there is a state file, else it is this process's alone. */
static int device_take(int dev, uint64_t bytes)
{
    if (!state) {
        if (used[dev] + bytes > cfg->total_bytes)
            return -1;
        used[dev] += bytes;
        return 0;
    }
    int g = phys_of[dev];
    fake_state_lock(state);
    if (state->used[g] + bytes > cfg->total_bytes)
        fake_state_reap_locked(state); /* memory of dead processes goes back, as with the driver */
    if (state->used[g] + bytes > cfg->total_bytes) {
        fake_state_unlock(state);
        return -1;
    }
    state->used[g] += bytes;
    state->now += bytes;
    if (state->now > state->peak)
        state->peak = state->now;
    struct fake_proc *p = my_entry_locked();
    if (p)
        p->bytes[g] += bytes;
    fake_state_unlock(state);
    used[dev] += bytes;
    return 0;
}

static void device_give(int dev, uint64_t bytes)
{
    used[dev] -= bytes;
    if (!state)
        return;
    int g = phys_of[dev];
    fake_state_lock(state);
    state->used[g] -= bytes < state->used[g] ? bytes : state->used[g];
    state->now -= bytes < state->now ? bytes : state->now;
    struct fake_proc *p = my_entry_locked();
    if (p)
        p->bytes[g] -= bytes < p->bytes[g] ? bytes : p->bytes[g];
    fake_state_unlock(state);
}

/* Allocate host memory standing for memory of device dev (-1: host memory, not counted), of
 * context ctx (NULL: none) taking charged bytes of the device; *key_out == 1 asks for a handle
 * instead of the address as the key. */
static CUresult fake_alloc_in(uint64_t bytes, uint64_t charged, int dev, CUcontext ctx, uint64_t *key_out,
                              void **mem_out)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_dev(dev) && dev != -1)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    if (dev >= 0 && device_take(dev, charged) != 0) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    size_t i;
    for (i = 0; m != MAP_FAILED && i < sizeof blocks / sizeof blocks[0] && blocks[i].mem; i++)
        ;
    if (m == MAP_FAILED || i == sizeof blocks / sizeof blocks[0]) {
        if (m != MAP_FAILED)
            munmap(m, bytes);
        if (dev >= 0)
            device_give(dev, charged);
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t key = key_out && *key_out == 1 ? next_handle++ : (uint64_t)(uintptr_t)m;
    blocks[i] = (struct block){key, bytes, dev >= 0 ? charged : 0, m, dev, ctx};
    pthread_mutex_unlock(&lock);
    if (key_out)
        *key_out = key;
    if (mem_out)
        *mem_out = m;
    return CUDA_SUCCESS;
}

CUresult fake_block_add(uint64_t bytes, int dev, uint64_t *key_out, void **mem_out)
{
    return fake_alloc_in(bytes, bytes, dev, NULL, key_out, mem_out);
}

int fake_block_size(uint64_t key, uint64_t *bytes)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0] && !found; i++)
        if (blocks[i].mem && blocks[i].key == key) {
            *bytes = blocks[i].bytes;
            found = 1;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

/* Linear memory of the current context: taken rounded up to FAKE_ALLOC_ROUND_MIB. */
static CUresult ctx_alloc(uint64_t bytes, int handle_key, uint64_t *key)
{
    if (!current)
        return initialised ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    uint64_t round = fake_env_bytes("FAKE_ALLOC_ROUND_MIB", 0), charged = bytes;
    if (round)
        charged = (bytes + round - 1) / round * round;
    *key = handle_key ? 1 : 0;
    return fake_alloc_in(bytes, charged, current_dev(), current, key, NULL);
}

static void drop_block_locked(size_t i)
{
    munmap(blocks[i].mem, blocks[i].bytes);
    if (blocks[i].dev >= 0)
        device_give(blocks[i].dev, blocks[i].charged);
    memset(&blocks[i], 0, sizeof blocks[i]);
}

CUresult fake_free(uint64_t key)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        if (blocks[i].mem && blocks[i].key == key) {
            drop_block_locked(i);
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static uint32_t contexts[FAKE_MAX_GPUS]; /* this process's live contexts, by ordinal */

/* NVML lists a process that has a context: counted here and in the node-wide state. */
static void count_context(int dev, int up)
{
    __atomic_add_fetch(&contexts[dev], up ? 1u : (uint32_t)-1, __ATOMIC_RELAXED);
    if (!state)
        return;
    fake_state_lock(state);
    struct fake_proc *p = my_entry_locked();
    if (p)
        p->contexts[phys_of[dev]] += up ? 1u : (uint32_t)-1;
    fake_state_unlock(state);
}

/* A context goes: its linear memory, modules and limits go with it, as with the driver. */
static void context_gone(CUcontext c)
{
    count_context(c->dev, 0);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        if (blocks[i].mem && blocks[i].ctx == c)
            drop_block_locked(i);
    pthread_mutex_unlock(&lock);
    fake_modules_context_gone(c);
    fake_context_limits_gone(c);
    fake_device_release(c->dev, fake_env_bytes("FAKE_CTX_MIB", 512));
}

/* A context takes FAKE_CTX_MIB of its device when it is made (a primary one at its first retain). */
static CUresult context_made(CUcontext c, int dev, int primary)
{
    if (fake_device_reserve(dev, fake_env_bytes("FAKE_CTX_MIB", 512)) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    count_context(dev, 1);
    *c = (struct CUctx_st){.live = 1, .dev = dev, .primary = primary, .stack = 1024, .heap = 8 * FAKE_MIB};
    return CUDA_SUCCESS;
}

/* What this process holds on fake GPU phys, for fake NVML's process list without a state file
 * (fake_nvml.c finds this function in the process). */
EXPORT uint32_t fake_gpu_self_contexts(int phys)
{
    uint32_t n = 0;
    for (int d = 0; d < ndev; d++)
        if (phys_of[d] == phys)
            n += __atomic_load_n(&contexts[d], __ATOMIC_RELAXED);
    return n;
}

EXPORT uint64_t fake_gpu_self_bytes(int phys)
{
    uint64_t total = 0;
    for (int d = 0; d < ndev; d++)
        if (phys_of[d] == phys)
            total += __atomic_load_n(&used[d], __ATOMIC_RELAXED);
    return total;
}

int fake_device_reserve(int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    int rc = valid_dev(dev) ? device_take(dev, bytes) : -1;
    pthread_mutex_unlock(&lock);
    return rc;
}

void fake_device_release(int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    if (valid_dev(dev))
        device_give(dev, bytes);
    pthread_mutex_unlock(&lock);
}

/* The entry whose memory this process holds the file descriptors of without having taken it:
 * its parent's, after a fork. */
static struct fake_proc *inherited;

/* After fork() the child holds no device memory of its own, but its parent's lives while it
 * does (it holds the driver's file descriptors), as with the driver. */
static void forget_in_child(void)
{
    if (state && (me || inherited)) {
        inherited = me ? me : inherited;
        fake_state_lock(state);
        fake_state_add_heir_locked(inherited);
        fake_state_unlock(state);
    }
    me = NULL;
    memset(used, 0, sizeof used);
    memset(blocks, 0, sizeof blocks);
    memset(primary_ctx, 0, sizeof primary_ctx);
    memset(extra_ctx, 0, sizeof extra_ctx);
    memset(primary_refs, 0, sizeof primary_refs);
    memset(contexts, 0, sizeof contexts);
    current = NULL;
    fake_memory_forget();
    fake_modules_forget();
}

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static void setup(void)
{
    cfg = fake_config();
    if (!cfg->ok)
        return;
    state = fake_state();
    map_ordinals();
    for (int i = 0; i < FAKE_MAX_GPUS; i++)
        primary_ctx[i].dev = i;
    pthread_atfork(NULL, NULL, forget_in_child);
    initialised = 1;
}

EXPORT CUresult cuInit(unsigned flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&setup_once, setup);
    return initialised ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = e == 0 ? "CUDA_SUCCESS" : e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : e == 3 ? "CUDA_ERROR_NOT_INITIALIZED"
                                                                                  : "CUDA_ERROR_OTHER";
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = ndev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d || !valid_dev(ordinal))
        return CUDA_ERROR_INVALID_VALUE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (!name || len < 16 || !valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", fake_config()->name);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    if (!u || !valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    fake_uuid(phys_of[d], (unsigned char *)u->bytes);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    return cuDeviceGetUuid(u, d);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes || !valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = cfg->total_bytes;
    return CUDA_SUCCESS;
}

/* The primary context exists from its first retain to its last release (or a reset). */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c || !valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    if (!primary_ctx[d].live) {
        CUresult rc = context_made(&primary_ctx[d], d, 1);
        if (rc != CUDA_SUCCESS) {
            pthread_mutex_unlock(&ctx_lock);
            return rc;
        }
    }
    primary_refs[d]++;
    pthread_mutex_unlock(&ctx_lock);
    *c = &primary_ctx[d];
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice d, int reset)
{
    if (!valid_dev(d) || (!reset && primary_refs[d] == 0))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    primary_refs[d] = reset ? 0 : primary_refs[d] - 1;
    int gone = primary_refs[d] == 0 && primary_ctx[d].live;
    if (gone)
        primary_ctx[d].live = 0;
    pthread_mutex_unlock(&ctx_lock);
    if (gone) {
        context_gone(&primary_ctx[d]);
        if (current == &primary_ctx[d])
            current = NULL;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    return primary_release(d, 0);
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    return primary_release(d, 1);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    *d = current->dev;
    return CUDA_SUCCESS;
}

/* A synchronize is where stream-ordered pools give back what they keep above their threshold. */
EXPORT CUresult cuCtxSynchronize(void)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_pools_synchronized();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d)
{
    (void)flags;
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c || !valid_dev(d))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    for (int i = 0; i < 64; i++) {
        if (!extra_ctx[i].live) {
            CUresult rc = context_made(&extra_ctx[i], d, 0);
            pthread_mutex_unlock(&ctx_lock);
            if (rc != CUDA_SUCCESS)
                return rc;
            *c = &extra_ctx[i];
            current = *c;
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c)
{
    pthread_mutex_lock(&ctx_lock);
    if (!c || (c >= primary_ctx && c < primary_ctx + FAKE_MAX_GPUS) || !c->live) {
        pthread_mutex_unlock(&ctx_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    c->live = 0;
    pthread_mutex_unlock(&ctx_lock);
    context_gone(c);
    if (current == c)
        current = NULL;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    CUresult rc = ctx_alloc(bytes, 0, &key);
    if (rc == CUDA_SUCCESS)
        *p = key;
    return rc;
}

/* Stream-ordered allocations may be freed by cuMemFree too (the driver synchronizes first). */
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc;
    if (fake_graph_free(p, &rc))
        return rc;
    if (p && fake_pool_free(p))
        return CUDA_SUCCESS;
    return p ? fake_free(p) : CUDA_SUCCESS;
}

/* ---- the 32-bit entry points without _v2: 32-bit addresses (handles here) and sizes ---- */
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned bytes)
{
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = 0;
    CUresult rc = ctx_alloc(bytes, 1, &key);
    if (rc == CUDA_SUCCESS)
        *p = (CUdeviceptr_v1)key;
    return rc;
}

EXPORT CUresult cuMemFree(CUdeviceptr_v1 p)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    return p ? fake_free(p) : CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned *pitch, unsigned width, unsigned height, unsigned elem)
{
    if (!p || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned pt = (width + 1023) & ~1023u;
    CUresult rc = cuMemAlloc(p, pt * height);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cuMemAlloc_v2(p, bytes);
}

/* The pitch is the width rounded up to 1 KiB, like a real GPU's texture alignment. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    if (!p || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (width + 1023) & ~(size_t)1023;
    CUresult rc = cuMemAlloc_v2(p, pt * height);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}

/* From the current pool of the current device (the default pool unless one was set). */
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s)
{
    CUresult rc;
    if (fake_capture_alloc(s, bytes, current_dev(), p, &rc))
        return rc; /* an allocation node of the graph being captured */
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current)
        return initialised ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    return fake_pool_alloc(fake_current_pool(current_dev()), bytes, p);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(p, bytes, s);
}

static uint64_t fmt_bytes(int f)
{
    return f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_SIGNED_INT32 ? 4
           : f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 ? 2
                                                                                                           : 1;
}

static CUresult make_array(uint64_t bytes, uint64_t *key)
{
    return ctx_alloc(bytes, 1, key);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = d->Width * (d->Height ? d->Height : 1) * fmt_bytes(d->Format) * d->NumChannels;
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * fmt_bytes(d->Format)
                      * d->NumChannels;
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY_DESCRIPTOR d2 = {d->Width, d->Height, d->Format, d->NumChannels};
    return cuArrayCreate_v2(a, &d2);
}

EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    if (!a || !d || !d->Width)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d2 = {d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags};
    return cuArray3DCreate_v2(a, &d2);
}

EXPORT CUresult cuArrayDestroy(CUarray a)
{
    return fake_free((uint64_t)(uintptr_t)a);
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    if (!a || !d || !d->Width || !levels)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key, b = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        b += (w ? w : 1) * (d->Height ? (h ? h : 1) : 1) * (d->Depth ? (z ? z : 1) : 1) * fmt_bytes(d->Format)
             * d->NumChannels;
    }
    CUresult rc = make_array(b, &key);
    if (rc == CUDA_SUCCESS)
        *a = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    return fake_free((uint64_t)(uintptr_t)a);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!free_b && !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    int d = current_dev();
    uint64_t in_use = state ? __atomic_load_n(&state->used[phys_of[d]], __ATOMIC_RELAXED) : used[d];
    if (free_b)
        *free_b = cfg->total_bytes - (in_use < cfg->total_bytes ? in_use : cfg->total_bytes);
    if (total_b)
        *total_b = cfg->total_bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
    memset((void *)(uintptr_t)p, v, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
    CUresult rc;
    if (fake_capture_memset(s, p, v, n, &rc))
        return rc;
    return cuMemsetD8_v2(p, v, n);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

static unsigned long launches;
/* Every launch entry point: what the launch of f grows (fake_launch_grows), then nothing runs. */
static CUresult launch(CUfunction f)
{
    launches++;
    return fake_launch_grows(f);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
    return launch(f);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    (void)params, (void)extra;
    return config ? launch(f) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return cuLaunchKernelEx(config, f, params, extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned n, unsigned flags)
{
    (void)flags;
    CUresult rc = list ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n && rc == CUDA_SUCCESS; i++)
        rc = launch(list[i].function);
    return rc;
}

EXPORT CUresult cuLaunch(CUfunction f)
{
    return launch(f);
}

EXPORT CUresult cuLaunchGrid(CUfunction f, int w, int h)
{
    (void)w, (void)h;
    return launch(f);
}

EXPORT CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
    (void)w, (void)h, (void)s;
    return launch(f);
}

/* With FAKE_INTERNAL_POINTERS=1 cuGetProcAddress answers with internal entry points, not the
 * exported symbols (as real drivers may): libvgpu must then route by name. */
static CUresult internal_alloc(CUdeviceptr *p, size_t bytes)
{
    return cuMemAlloc_v2(p, bytes);
}
static CUresult internal_alloc_async(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync(p, bytes, s);
}
static CUresult internal_alloc_async_ptsz(CUdeviceptr *p, size_t bytes, CUstream s)
{
    return cuMemAllocAsync_ptsz(p, bytes, s);
}
static CUresult internal_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

static CUresult internal_instantiate(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    return cuGraphInstantiateWithFlags(exec, g, flags);
}

static void *internal_pointer(const char *symbol, int version, cuuint64_t flags)
{
    const char *e = getenv("FAKE_INTERNAL_POINTERS");
    if (!e || e[0] != '1')
        return NULL;
    int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (!strcmp(symbol, "cuMemAlloc"))
        return (void *)internal_alloc;
    if (!strcmp(symbol, "cuMemAllocAsync"))
        return ptds ? (void *)internal_alloc_async_ptsz : (void *)internal_alloc_async;
    if (!strcmp(symbol, "cuLaunchKernel"))
        return (void *)internal_launch;
    if (!strcmp(symbol, "cuGraphInstantiate") && version >= 12000)
        return (void *)internal_instantiate;
    return NULL;
}

/* Like the real driver: base name + version + flags -> the exported versioned function. */
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    Dl_info info;
    void *self = NULL;
    if (dladdr((void *)cuGetProcAddress_v2, &info))
        self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    char name[256];
    void *p = internal_pointer(symbol, version, flags);
    if (!p && !strcmp(symbol, "cuGraphInstantiate") && version >= 12000)
        symbol = "cuGraphInstantiateWithFlags"; /* the CUDA 12 ABI of that name, as cuda.h maps it */
    if (!p && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        snprintf(name, sizeof name, "%s_ptsz", symbol);
        p = dlsym(self, name);
    }
    if (!p && version >= 3020) {
        snprintf(name, sizeof name, "%s_v2", symbol);
        p = dlsym(self, name);
    }
    if (!p)
        p = dlsym(self, symbol);
    if (self)
        dlclose(self);
    if (status)
        *status = p ? 0 : 1;
    if (!p) {
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
