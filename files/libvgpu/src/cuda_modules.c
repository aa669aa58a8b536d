/* Modules and libraries: their static device memory (`__device__` and `.global` arrays, 1 GiB in
 * a PTX module costs 1 GiB) is measured (cuda_measure.c) where the driver takes it: a module at
 * its load, a library at its load (eager loading) and at its first kernel and module lookups
 * (cuLibraryGetKernel, cuKernelGetFunction, cuLibraryGetModule: lazy loading). Later lookups of
 * the same library are plain forwards with one table lookup. A load or lookup that does not fit
 * is undone (the module or library unloaded) and answers CUDA_ERROR_OUT_OF_MEMORY; a library
 * libvgpu unloaded that way answers its owner CUDA_ERROR_OUT_OF_MEMORY from then on, and its
 * cuLibraryUnload succeeds. What loads inside cuLaunchKernel (cudart 12+ launches kernels of
 * libraries it never looked up) has no hook without a cost per launch: the GPU's own count at
 * the next admission (cuda_account.c) covers it. Without a per-process NVML figure nothing is
 * charged here. */
#include "cuda_shim.h"

static uint64_t key_of(const void *handle)
{
    return (uint64_t)(uintptr_t)handle;
}

/* ---- modules ---- */
/* The load itself is CALL; a measured cost is charged to *mod, or the module unloaded. */
#define MODULE_LOAD(NAME, CALL)                                                                                       \
    do {                                                                                                              \
        int dev;                                                                                                      \
        if (vgpu_cuda.exiting || !mod || vgpu_current_device(&dev) != 0)                                              \
            return CALL;                                                                                              \
        struct vgpu_measure m;                                                                                        \
        vgpu_measure_begin(dev, &m);                                                                                  \
        CUresult rc = CALL;                                                                                           \
        int64_t cost = 0;                                                                                             \
        if (vgpu_measure_end(&m, 0, &cost) != 0 || rc != CUDA_SUCCESS || cost <= 0)                                   \
            return rc;                                                                                                \
        if (vgpu_admit_overhead(dev, (uint64_t)cost, &m.after) != 0) {                                                \
            REAL(cuModuleUnload)(*mod);                                                                               \
            *mod = NULL;                                                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        }                                                                                                             \
        struct vgpu_track_entry e = {.key = key_of(*mod), .bytes = (uint64_t)cost,                                   \
                                     .aux = key_of(vgpu_current_context()), .dev = dev, .kind = VGPU_K_MODULE},       \
                                old;                                                                                  \
        if (vgpu_track_put_entry(&e, &old) == 1)                                                                      \
            vgpu_release_overhead(old.dev, old.bytes);                                                                \
        return rc;                                                                                                    \
    } while (0)

VGPU_EXPORT CUresult cuModuleLoad(CUmodule *mod, const char *path)
{
    HOOK_ENTER(cuModuleLoad, mod, path);
    MODULE_LOAD(cuModuleLoad, REAL(cuModuleLoad)(mod, path));
}

VGPU_EXPORT CUresult cuModuleLoadData(CUmodule *mod, const void *image)
{
    HOOK_ENTER(cuModuleLoadData, mod, image);
    MODULE_LOAD(cuModuleLoadData, REAL(cuModuleLoadData)(mod, image));
}

VGPU_EXPORT CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned int n, int *options, void **values)
{
    HOOK_ENTER(cuModuleLoadDataEx, mod, image, n, options, values);
    MODULE_LOAD(cuModuleLoadDataEx, REAL(cuModuleLoadDataEx)(mod, image, n, options, values));
}

VGPU_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *fatbin)
{
    HOOK_ENTER(cuModuleLoadFatBinary, mod, fatbin);
    MODULE_LOAD(cuModuleLoadFatBinary, REAL(cuModuleLoadFatBinary)(mod, fatbin));
}

VGPU_EXPORT CUresult cuModuleUnload(CUmodule mod)
{
    HOOK_ENTER(cuModuleUnload, mod);
    struct vgpu_track_entry e;
    int tracked = vgpu_track_take_entry(VGPU_K_MODULE, key_of(mod), &e) == 0;
    CUresult rc = REAL(cuModuleUnload)(mod);
    if (rc == CUDA_SUCCESS) {
        if (tracked)
            vgpu_release_overhead(e.dev, e.bytes);
        /* its functions' addresses may name another module's: the driver gives them out again
         * (an H100, driver 580), and a module that cost nothing measurable has no entry */
        vgpu_launches_forget();
    } else if (tracked) {
        vgpu_track_put_entry(&e, &e);
    }
    return rc;
}

/* ---- libraries ---- */
static int add_cost(struct vgpu_track_entry *e, void *cost)
{
    e->bytes += *(uint64_t *)cost;
    return 0;
}

static int set_flags(struct vgpu_track_entry *e, void *flags)
{
    e->flags |= *(uint32_t *)flags;
    return 0;
}

/* The library's flags (0 when libvgpu does not know it). */
static uint32_t library_flags(CUlibrary lib)
{
    struct vgpu_track_entry e;
    uint32_t none = 0;
    return vgpu_track_with(VGPU_K_LIBRARY, key_of(lib), set_flags, &none, &e) < 0 ? 0 : e.flags;
}

/* A measured cost of lib (its load or a lookup), charged to it; 0, or -1 when it does not fit
 * (then the library is unloaded and remembered as undone). */
static int charge_library(CUlibrary lib, int dev, struct vgpu_measure *m, uint32_t flags)
{
    int64_t cost = 0;
    int measured = vgpu_measure_end(m, 0, &cost) == 0;
    struct vgpu_track_entry e = {.key = key_of(lib), .aux = key_of(vgpu_current_context()), .dev = dev,
                                 .kind = VGPU_K_LIBRARY, .flags = flags},
                            old;
    if (vgpu_track_with(VGPU_K_LIBRARY, key_of(lib), set_flags, &flags, NULL) < 0)
        vgpu_track_put_entry(&e, &old);
    if (!measured || cost <= 0)
        return 0;
    if (vgpu_admit_overhead(dev, (uint64_t)cost, &m->after) == 0) {
        uint64_t up = (uint64_t)cost;
        vgpu_track_with(VGPU_K_LIBRARY, key_of(lib), add_cost, &up, NULL);
        return 0;
    }
    if (vgpu_track_take_entry(VGPU_K_LIBRARY, key_of(lib), &old) == 0)
        vgpu_release_overhead(old.dev, old.bytes);
    REAL(cuLibraryUnload)(lib);
    struct vgpu_track_entry undone = {.key = key_of(lib), .kind = VGPU_K_LIBRARY, .flags = VGPU_F_UNDONE};
    vgpu_track_put_entry(&undone, &old);
    return -1;
}

#define LIBRARY_LOAD(CALL)                                                                                            \
    do {                                                                                                              \
        int dev;                                                                                                      \
        if (vgpu_cuda.exiting || !lib || vgpu_current_device(&dev) != 0)                                              \
            return CALL;                                                                                              \
        struct vgpu_measure m;                                                                                        \
        vgpu_measure_begin(dev, &m);                                                                                  \
        CUresult rc = CALL;                                                                                           \
        if (rc != CUDA_SUCCESS) {                                                                                     \
            int64_t ignored;                                                                                          \
            vgpu_measure_end(&m, 0, &ignored);                                                                        \
            return rc;                                                                                                \
        }                                                                                                             \
        if (charge_library(*lib, dev, &m, 0) != 0) {                                                                  \
            vgpu_track_take_entry(VGPU_K_LIBRARY, key_of(*lib), &(struct vgpu_track_entry){0});                      \
            *lib = NULL;                                                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        }                                                                                                             \
        return rc;                                                                                                    \
    } while (0)

VGPU_EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, void *jit_options, void **jit_values,
                                       unsigned int njit, void *lib_options, void **lib_values, unsigned int nlib)
{
    HOOK_ENTER(cuLibraryLoadData, lib, code, jit_options, jit_values, njit, lib_options, lib_values, nlib);
    LIBRARY_LOAD(REAL(cuLibraryLoadData)(lib, code, jit_options, jit_values, njit, lib_options, lib_values, nlib));
}

VGPU_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, void *jit_options, void **jit_values,
                                           unsigned int njit, void *lib_options, void **lib_values, unsigned int nlib)
{
    HOOK_ENTER(cuLibraryLoadFromFile, lib, path, jit_options, jit_values, njit, lib_options, lib_values, nlib);
    LIBRARY_LOAD(REAL(cuLibraryLoadFromFile)(lib, path, jit_options, jit_values, njit, lib_options, lib_values, nlib));
}

VGPU_EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
    HOOK_ENTER(cuLibraryUnload, lib);
    struct vgpu_track_entry e;
    int tracked = vgpu_track_take_entry(VGPU_K_LIBRARY, key_of(lib), &e) == 0;
    if (tracked && (e.flags & VGPU_F_UNDONE))
        return CUDA_SUCCESS; /* libvgpu unloaded it already */
    CUresult rc = REAL(cuLibraryUnload)(lib);
    if (rc == CUDA_SUCCESS) {
        if (tracked)
            vgpu_release_overhead(e.dev, e.bytes);
        vgpu_launches_forget(); /* its kernels' addresses may name another library's, tracked or not */
    } else if (tracked) {
        vgpu_track_put_entry(&e, &e);
    }
    return rc;
}

/* A lookup of lib: measured unless a flag of SKIP says it cost nothing more (then a plain forward);
 * FLAG records it measured. */
#define LIBRARY_LOOKUP(LIB, SKIP, FLAG, CALL, AFTER)                                                                        \
    do {                                                                                                              \
        uint32_t flags_ = library_flags(LIB);                                                                         \
        int dev;                                                                                                      \
        if (flags_ & VGPU_F_UNDONE)                                                                                   \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        if ((flags_ & (SKIP)) || vgpu_cuda.exiting || vgpu_current_device(&dev) != 0) {                               \
            CUresult rc_ = CALL;                                                                                      \
            AFTER;                                                                                                    \
            return rc_;                                                                                               \
        }                                                                                                             \
        struct vgpu_measure m;                                                                                        \
        vgpu_measure_begin(dev, &m);                                                                                  \
        CUresult rc_ = CALL;                                                                                          \
        if (rc_ != CUDA_SUCCESS) {                                                                                    \
            int64_t ignored;                                                                                          \
            vgpu_measure_end(&m, 0, &ignored);                                                                        \
            return rc_;                                                                                               \
        }                                                                                                             \
        if (charge_library(LIB, dev, &m, FLAG) != 0)                                                                  \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                          \
        AFTER;                                                                                                        \
        return rc_;                                                                                                   \
    } while (0)

/* Every kernel remembers its library, so that cuKernelGetFunction knows whose memory it loads. */
#define REMEMBER_KERNEL()                                                                                             \
    do {                                                                                                              \
        if (rc_ == CUDA_SUCCESS && kernel && *kernel) {                                                               \
            struct vgpu_track_entry k_ = {.key = key_of(*kernel), .aux = key_of(lib), .kind = VGPU_K_KERNEL}, o_;     \
            vgpu_track_put_entry(&k_, &o_);                                                                           \
        }                                                                                                             \
    } while (0)

VGPU_EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary lib, const char *name)
{
    HOOK_ENTER(cuLibraryGetKernel, kernel, lib, name);
    LIBRARY_LOOKUP(lib, VGPU_F_KERNEL_SEEN | VGPU_F_RESIDENT, VGPU_F_KERNEL_SEEN, REAL(cuLibraryGetKernel)(kernel, lib, name),
                   REMEMBER_KERNEL());
}

VGPU_EXPORT CUresult cuLibraryGetModule(CUmodule *mod, CUlibrary lib)
{
    HOOK_ENTER(cuLibraryGetModule, mod, lib);
    LIBRARY_LOOKUP(lib, VGPU_F_RESIDENT, VGPU_F_RESIDENT, REAL(cuLibraryGetModule)(mod, lib), (void)0);
}

VGPU_EXPORT CUresult cuKernelGetFunction(CUfunction *func, CUkernel kernel)
{
    HOOK_ENTER(cuKernelGetFunction, func, kernel);
    struct vgpu_track_entry k;
    uint32_t none = 0;
    if (vgpu_track_with(VGPU_K_KERNEL, key_of(kernel), set_flags, &none, &k) < 0)
        return REAL(cuKernelGetFunction)(func, kernel);
    CUlibrary lib = (CUlibrary)(uintptr_t)k.aux;
    LIBRARY_LOOKUP(lib, VGPU_F_RESIDENT, VGPU_F_RESIDENT, REAL(cuKernelGetFunction)(func, kernel), (void)0);
}
