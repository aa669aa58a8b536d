/* cuGetProcAddress: the driver answers first, then its answer is routed to our hook with the same
 * ABI. The driver may answer with an internal pointer that no exported symbol has, so identity
 * alone is not enough: hooks.def gives, for each base name we hook, the first version at which
 * the driver hands out the ABI of our hook (what cuda.h maps the name to), and the _ptsz variant
 * for per-thread default stream callers (VGPU_CUDA_ROUTES, highest version first). */
#include <stdlib.h>
#include <string.h>

#include "cuda_shim.h"

#define HOOK_ADDR(n) (void *)n,
static void *const hook_ptr[N_HOOKS] = {VGPU_CUDA_HOOKS(HOOK_ADDR)};

#define ROUTE_ENTRY(base, since, legacy, ptsz) {base, since, H_##legacy, H_##ptsz},
static const struct {
    const char *base;
    int min_version;
    int legacy, ptsz; /* hook indexes */
} by_name[] = {VGPU_CUDA_ROUTES(ROUTE_ENTRY)};

static int per_thread_stream(cuuint64_t flags)
{
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return 1;
    if (flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM)
        return 0;
    /* CU_GET_PROC_ADDRESS_DEFAULT follows the process's setting, as the driver does */
    const char *e = getenv("CUDA_API_PER_THREAD_DEFAULT_STREAM");
    return e && e[0] == '1';
}

static void *route(const char *symbol, void *p, int version, cuuint64_t flags)
{
    if (vgpu_cuda.defer)
        return p; /* libvgpu.so routed it already */
    for (int i = 0; i < N_HOOKS; i++) {
        if (vgpu_cuda_real[i] != p)
            continue;
        if (symbol)
            vgpu_log(VGPU_DEBUG, "cuGetProcAddress(%s, %d): hook by identity", symbol, version);
        return hook_ptr[i];
    }
    if (!symbol)
        return p;
    for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++) {
        if (strcmp(symbol, by_name[i].base) != 0 || version < by_name[i].min_version)
            continue;
        int h = per_thread_stream(flags) ? by_name[i].ptsz : by_name[i].legacy;
        vgpu_log(VGPU_DEBUG, "cuGetProcAddress(%s, %d): hook by name", symbol, version);
        return hook_ptr[h];
    }
    return p;
}

VGPU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    vgpu_cuda_load();
    if (!REAL(cuGetProcAddress))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = REAL(cuGetProcAddress)(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = route(symbol, *pfn, version, flags);
    return rc;
}

VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    vgpu_cuda_load();
    if (!REAL(cuGetProcAddress_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = route(symbol, *pfn, version, flags);
    return rc;
}

/* Used by the dlsym override of libvgpu.so: our hook for a real driver pointer, or NULL. */
void *vgpu_cuda_hook_for(void *real)
{
    vgpu_cuda_load_library();
    if (!real)
        return NULL;
    void *h = route(NULL, real, 0, 0);
    return h == real ? NULL : h;
}
