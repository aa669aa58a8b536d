/* Launch audit (GPU_COMPUTE_AUDIT=1): kernel and graph launches counted in the process's slot.
 * Launches are plain generated forwards; only when auditing are these wrappers put into the
 * forwarding table (vgpu_audit_install) and handed out by cuGetProcAddress (cuda_route.c). */
#include <string.h>

#include "cuda_shim.h"

static void count_launch(void)
{
    int s = vgpu_cuda.slot;
    if (vgpu_cuda.audit && vgpu_cuda.region && s >= 0 && (unsigned)s < VGPU_MAX_SLOTS)
        __atomic_fetch_add(&vgpu_cuda.region->slots[s].launches, 1, __ATOMIC_RELAXED);
}

#define LAUNCH11(NAME)                                                                                                \
    CUresult vgpu_audit_##NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,        \
                               unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)             \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME)(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);                                   \
    }
LAUNCH11(cuLaunchKernel)
LAUNCH11(cuLaunchKernel_ptsz)

#define LAUNCH_COOP(NAME)                                                                                             \
    CUresult vgpu_audit_##NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,        \
                               unsigned bz, unsigned shmem, CUstream stream, void **params)                           \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME)(f, gx, gy, gz, bx, by, bz, shmem, stream, params);                                          \
    }
LAUNCH_COOP(cuLaunchCooperativeKernel)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

#define LAUNCH_EX(NAME)                                                                                               \
    CUresult vgpu_audit_##NAME(const void *config, CUfunction f, void **params, void **extra)                        \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME)(config, f, params, extra);                                                                  \
    }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define GRAPH_LAUNCH(NAME)                                                                                            \
    CUresult vgpu_audit_##NAME(CUgraphExec exec, CUstream stream)                                                    \
    {                                                                                                                 \
        READY_OR_RETURN();                                                                                            \
        count_launch();                                                                                               \
        return REAL(NAME)(exec, stream);                                                                              \
    }
GRAPH_LAUNCH(cuGraphLaunch)
GRAPH_LAUNCH(cuGraphLaunch_ptsz)

/* With auditing on, point the launch trampolines at the audit wrappers. */
void vgpu_audit_install(void)
{
#define AUDIT_ADDR(n) (void *)vgpu_audit_##n,
    static void *const wrappers[N_AUDITS] = {VGPU_CUDA_AUDITS(AUDIT_ADDR)};
    for (unsigned i = 0; i < vgpu_fwd_count_cuda; i++)
        for (int a = 0; a < N_AUDITS; a++) {
            int h = H_AUDIT_FIRST + a;
            if (strcmp(vgpu_fwd_names_cuda[i], vgpu_cuda_names[h]) == 0
                && vgpu_cuda_real[h] != (void *)vgpu_cuda_not_supported)
                __atomic_store_n(&vgpu_fwd_table_cuda[i], wrappers[a], __ATOMIC_RELEASE);
        }
}
