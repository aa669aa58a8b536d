/* libvgpu.so (LD_PRELOAD) only: dlsym() on the real driver must not escape the hooks. Our
 * exported dlsym (dlsym_entry.S) tail-jumps to the real one for RTLD_NEXT so that glibc still
 * sees the caller's return address; every other lookup goes through vgpu_dlsym_c, which maps a
 * real driver function to our hook with the same ABI. Internal code calls vgpu_real_dlsym. */
#include <dlfcn.h>
#include <string.h>

#include "hooks.h"
#include "vgpu.h"

#undef dlsym
VGPU_HIDDEN void *vgpu_real_dlsym_fn;

/* Tells a libcuda.so.1 shim in the same process that libvgpu.so is here (cuda_core.c). */
VGPU_EXPORT const char vgpu_preload_marker[] = "libvgpu.so";

VGPU_EARLY static void resolve(void)
{
    if (vgpu_real_dlsym_fn)
        return;
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (!p)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
    __atomic_store_n(&vgpu_real_dlsym_fn, p, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void dlsym_init(void)
{
    resolve();
}

VGPU_HIDDEN VGPU_EARLY void *vgpu_real_dlsym(void *handle, const char *name)
{
    resolve();
    return ((void *(*)(void *, const char *))vgpu_real_dlsym_fn)(handle, name);
}

VGPU_HIDDEN VGPU_EARLY void *vgpu_dlsym_c(void *handle, const char *name)
{
    void *p = vgpu_real_dlsym(handle, name);
    if (!p || !name)
        return p;
    void *hook = NULL;
    if (name[0] == 'c' && name[1] == 'u')
        hook = vgpu_cuda_hook_for(p);
    else if (strncmp(name, "nvml", 4) == 0)
        hook = vgpu_nvml_hook_for(p);
    return hook ? hook : p;
}
