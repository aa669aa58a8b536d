/* The CUDA shim's process life: cuInit (the process's slot in the region, the devices' UUIDs),
 * fork (a child's slot: whose memory it keeps alive) and exit. Loading the driver and the
 * configuration is cuda_loader.c's, the state cuda_state.c's; the hooks live in cuda_memory.c,
 * cuda_pools.c, cuda_vmm.c, cuda_arrays.c, cuda_contexts.c, cuda_limits.c, cuda_modules.c,
 * cuda_graphs.c, cuda_graph_kernels.c, cuda_reports.c, cuda_launch.c and cuda_route.c; each file
 * forgets its own state in a fork child. */
#include <pthread.h>
#include <unistd.h>

#include "cuda_shim.h"

static int attached_pid; /* the process whose slot vgpu_cuda.slot is */

static void at_fork_child(void)
{
    /* the child holds no GPU memory of its own, but the driver's file descriptors of its parent's:
     * a slot of its own says so, so that memory counts until the child is gone too (issue 38) */
    vgpu_cuda.slot = vgpu_region_fork_child(vgpu_cuda.region, vgpu_cuda.slot);
    if (vgpu_cuda.slot >= 0)
        attached_pid = getpid(); /* its cuInit must not take that slot as a previous image's */
}

__attribute__((constructor)) static void register_fork(void)
{
    pthread_atfork(NULL, NULL, at_fork_child);
}

/* The UUIDs of the devices, so that NVML (nvml_hooks.c) maps its devices to CUDA ordinals. */
static void record_uuids(void)
{
    int n = 0;
    vgpu_fn_cuDeviceGetUuid *get_uuid = REAL(cuDeviceGetUuid_v2) ? REAL(cuDeviceGetUuid_v2) : REAL(cuDeviceGetUuid);
    if (!REAL(cuDeviceGetCount) || !REAL(cuDeviceGet) || !get_uuid || REAL(cuDeviceGetCount)(&n) != CUDA_SUCCESS)
        return;
    for (int i = 0; i < n && i < VGPU_MAX_DEVICES; i++) {
        CUdevice d;
        CUuuid u;
        if (REAL(cuDeviceGet)(&d, i) == CUDA_SUCCESS && get_uuid(&u, d) == CUDA_SUCCESS)
            vgpu_region_record_uuid(vgpu_cuda.region, i, (const uint8_t *)u.bytes);
    }
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

VGPU_EXPORT CUresult cuInit(unsigned int flags)
{
    HOOK_ENTER(cuInit, flags);
    CUresult rc = REAL(cuInit)(flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&init_lock);
    if (attached_pid != getpid()) {
        attached_pid = getpid();
        vgpu_cuda.slot = vgpu_region_attach(vgpu_cuda.region, &vgpu_cuda.cfg);
        record_uuids();
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

/* At exit our memory goes back to the container at once, without waiting for a sweep. */
__attribute__((destructor)) static void vgpu_cuda_exit(void)
{
    vgpu_cuda.exiting = 1;
    if (vgpu_cuda.region && vgpu_cuda.slot >= 0 && attached_pid == getpid())
        vgpu_region_detach(vgpu_cuda.region, vgpu_cuda.slot);
}
