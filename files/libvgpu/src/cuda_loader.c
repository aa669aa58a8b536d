/* Loading the real driver and the configuration, once, and the forwarding of every driver export
 * without a hook (gen/gen-forward.sh's trampolines call vgpu_fwd_resolve_cuda once per name). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_shim.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static void *real_lib;

static CUresult fwd_not_initialised(void)
{
    return CUDA_ERROR_NOT_INITIALIZED;
}
/* Every launch asks for the current context: a driver without cuCtxGetCurrent has none. */
static CUresult no_current_context(CUcontext *ctx)
{
    if (ctx)
        *ctx = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

#ifndef VGPU_PRELOAD
/* libvgpu.so preloaded into this process too (both library modes at once): its handle. */
static void *preloaded_libvgpu(void)
{
    void *marker = dlsym(RTLD_DEFAULT, "vgpu_preload_marker");
    Dl_info info;
    if (!marker || !dladdr(marker, &info) || !info.dli_fname)
        return NULL;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}
#endif

static void load_real(void)
{
    char err[800];
#ifndef VGPU_PRELOAD
    /* With libvgpu.so in the process, this shim forwards everything to it: one accounting, so
     * nothing is charged twice whichever library a caller reached. */
    if ((real_lib = preloaded_libvgpu()) != NULL) {
        vgpu_cuda.defer = 1;
        vgpu_log(VGPU_INFO, "libvgpu.so is preloaded: libcuda.so.1 forwards every call to it");
    }
    if (!real_lib)
#endif
        real_lib = vgpu_open_real("libcuda.so.1", "VGPU_REAL_LIBCUDA", err, sizeof err);
    if (!real_lib) {
        vgpu_log(VGPU_ERR, "%s", err);
        return;
    }
    for (int i = 0; i < H_COUNT; i++) {
        vgpu_cuda_real[i] = dlsym(real_lib, vgpu_cuda_names[i]);
        /* a hook whose driver function is missing (an older driver) answers "not supported" */
        if (!vgpu_cuda_real[i] && i < N_HOOKS)
            vgpu_cuda_real[i] = (void *)vgpu_cuda_not_supported;
    }
    if (!vgpu_cuda_real[H_cuCtxGetCurrent])
        vgpu_cuda_real[H_cuCtxGetCurrent] = (void *)no_current_context;
}

static void load_config(void)
{
    char err[800];
    struct vgpu_cuda_state *s = &vgpu_cuda;
    if (vgpu_config_load(&s->cfg, err, sizeof err) != 0) {
        fprintf(stderr, "vgpu: invalid configuration: %s; CUDA initialisation refused\n", err);
        return;
    }
    s->region = vgpu_region_map(s->cfg.region_dir, s->cfg.region_dir_explicit, 1, err, sizeof err);
    if (!s->region) {
        fprintf(stderr, "vgpu: VGPU_REGION_DIR=\"%s\": %s; CUDA initialisation refused\n", s->cfg.region_dir, err);
        return;
    }
    s->audit = s->cfg.compute_audit;
    s->cfg_ok = 1;
    vgpu_log(VGPU_INFO, "quota from %s, enforce=%d, virtual_memory=%d", s->cfg.source, s->cfg.limit_enforce,
             s->cfg.virtual_memory);
}

void vgpu_cuda_load_library(void)
{
    pthread_once(&load_once, load_real);
}

/* Runtimes resolve their entry points before cuInit, so the configuration is loaded before the
 * first hook runs: cuGetProcAddress calls this too. */
void vgpu_cuda_load(void)
{
    pthread_once(&load_once, load_real);
    if (real_lib && !vgpu_cuda.defer)
        pthread_once(&config_once, load_config);
}

CUresult vgpu_cuda_ready_slow(void)
{
    vgpu_cuda_load();
    if (!real_lib || (!vgpu_cuda.cfg_ok && !vgpu_cuda.defer))
        return CUDA_ERROR_NOT_INITIALIZED;
    __atomic_store_n(&vgpu_cuda.ready, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* Forwarding of the calls that have no hook (called by the generated trampolines once per name). */
void *vgpu_fwd_resolve_cuda(unsigned index)
{
    pthread_once(&load_once, load_real);
    void *p = NULL;
    if (!real_lib)
        p = (void *)fwd_not_initialised;
    else if (!(p = dlsym(real_lib, vgpu_fwd_names_cuda[index]))) {
        vgpu_log(VGPU_DEBUG, "%s is not in the real driver", vgpu_fwd_names_cuda[index]);
        p = (void *)vgpu_cuda_not_supported;
    }
    __atomic_store_n(&vgpu_fwd_table_cuda[index], p, __ATOMIC_RELEASE);
    return p;
}
