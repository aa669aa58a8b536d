/* The fake CUDA driver's code and limits, with the real driver's costs (tests/README.md):
 *  - a module's static device memory is the sum of its PTX `.global` arrays (`.global .b8
 *    buf[1073741824];` costs 1 GiB), taken at cuModuleLoad* in the current context and given
 *    back at cuModuleUnload or when the context goes;
 *  - a library (cuLibraryLoad*) loads lazily: its memory is taken the first time it is needed in
 *    a context: cuKernelGetFunction, cuLibraryGetModule, or a launch of one of its kernels
 *    (cuLaunchKernel with a CUkernel, as cudart 12+ does) - a cost no interposer hook sees;
 *  - cuCtxSetLimit(CU_LIMIT_STACK_SIZE) takes (size - 1 KiB) x FAKE_RESIDENT_THREADS (default
 *    16384) at the call; CU_LIMIT_MALLOC_HEAP_SIZE takes (size - 8 MiB) at the next launch. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"
#include "fake_gpu.h"

#define MOD_MAGIC 0x444f4d46u  /* "FMOD" */
#define LIB_MAGIC 0x42494c46u  /* "FLIB" */
#define KERN_MAGIC 0x4e524b46u /* "FKRN" */
#define FUNC_MAGIC 0x434e5546u /* "FUNC" */

struct CUmod_st {
    unsigned magic;
    int live, dev;
    CUcontext ctx;
    uint64_t bytes;
    CUlibrary lib; /* a library's module (cuLibraryGetModule): unloaded with the library */
};
struct CUlib_st {
    unsigned magic;
    int live;
    uint64_t bytes;    /* its .global arrays */
    CUcontext loaded;  /* the context it is loaded into, NULL = not yet */
    int dev;
    struct CUmod_st module;
};
struct CUkern_st {
    unsigned magic;
    CUlibrary lib;
};
struct CUfunc_st {
    unsigned magic;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUmodule mods[1024];
static CUlibrary libs[1024];
static struct CUfunc_st the_function = {FUNC_MAGIC};

/* Bytes of the .global arrays of a PTX text: each "[N]" (or "[N][M]") times its element size. */
static uint64_t ptx_globals(const char *ptx, size_t len)
{
    uint64_t total = 0;
    const char *end = ptx + len;
    for (const char *line = ptx; line && line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
        const char *g = strstr(buf, ".global"), *br = strchr(buf, '[');
        if (g && br && !strstr(buf, ".entry") && !strstr(buf, ".func")) {
            uint64_t elem = 1; /* the type's bits / 8: .b8 .u16 .s32 .f64 ... */
            for (const char *t = strchr(buf, '.'); t; t = strchr(t + 1, '.'))
                if (t[1] && strchr("busf", t[1]) && t[2] >= '1' && t[2] <= '9')
                    elem = strtoull(t + 2, NULL, 10) / 8 ? strtoull(t + 2, NULL, 10) / 8 : 1;
            for (const char *b = br; b; b = strchr(b + 1, '['))
                elem *= strtoull(b + 1, NULL, 10);
            total += elem;
        }
        line = nl ? nl + 1 : NULL;
    }
    return total;
}

/* The .global bytes of a module image: PTX text, or nothing for anything else (a cubin). */
static uint64_t image_globals(const void *image)
{
    const char *text = image;
    if (!text || !strstr(text, ".version"))
        return 0;
    return ptx_globals(text, strlen(text));
}

static uint64_t file_globals(const char *path, int *ok)
{
    FILE *f = path ? fopen(path, "re") : NULL;
    *ok = f != NULL;
    if (!f)
        return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return image_globals(buf);
}

static CUresult module_load(CUmodule *m, uint64_t bytes)
{
    CUcontext c = fake_current_ctx();
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c)
        return fake_ready() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    CUmodule mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *mod = (struct CUmod_st){MOD_MAGIC, 1, c->dev, c, bytes, NULL};
    if (bytes && fake_device_reserve(c->dev, bytes) != 0) {
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    size_t i;
    for (i = 0; i < sizeof mods / sizeof mods[0] && mods[i]; i++)
        ;
    if (i == sizeof mods / sizeof mods[0]) {
        pthread_mutex_unlock(&lock);
        fake_device_release(c->dev, bytes);
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mods[i] = mod;
    pthread_mutex_unlock(&lock);
    *m = mod;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    return image ? module_load(m, image_globals(image)) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, int *options, void **values)
{
    (void)n, (void)options, (void)values;
    return cuModuleLoadData(m, image);
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin)
{
    return cuModuleLoadData(m, fatbin);
}

EXPORT CUresult cuModuleLoad(CUmodule *m, const char *path)
{
    int ok;
    uint64_t bytes = file_globals(path, &ok);
    return ok ? module_load(m, bytes) : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuModuleUnload(CUmodule m)
{
    pthread_mutex_lock(&lock);
    size_t i;
    for (i = 0; i < sizeof mods / sizeof mods[0] && mods[i] != m; i++)
        ;
    if (!m || i == sizeof mods / sizeof mods[0]) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    mods[i] = NULL;
    pthread_mutex_unlock(&lock);
    if (m->bytes)
        fake_device_release(m->dev, m->bytes);
    free(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (!f || !m || m->magic != MOD_MAGIC || !name)
        return CUDA_ERROR_INVALID_VALUE;
    *f = (CUfunction)&the_function;
    return CUDA_SUCCESS;
}

/* ---- libraries: context-independent, loaded into a context on first need ---- */
static CUresult library_load(CUlibrary *l, uint64_t bytes)
{
    if (!l)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUlibrary lib = calloc(1, sizeof *lib);
    if (!lib)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *lib = (struct CUlib_st){.magic = LIB_MAGIC, .live = 1, .bytes = bytes};
    pthread_mutex_lock(&lock);
    size_t i;
    for (i = 0; i < sizeof libs / sizeof libs[0] && libs[i]; i++)
        ;
    if (i == sizeof libs / sizeof libs[0]) {
        pthread_mutex_unlock(&lock);
        free(lib);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    libs[i] = lib;
    pthread_mutex_unlock(&lock);
    *l = lib;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLibraryLoadData(CUlibrary *l, const void *code, int *jit_opts, void **jit_vals, unsigned njit,
                                  int *lib_opts, void **lib_vals, unsigned nlib)
{
    (void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
    return code ? library_load(l, image_globals(code)) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *path, int *jit_opts, void **jit_vals, unsigned njit,
                                      int *lib_opts, void **lib_vals, unsigned nlib)
{
    (void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
    int ok;
    uint64_t bytes = file_globals(path, &ok);
    return ok ? library_load(l, bytes) : CUDA_ERROR_NOT_FOUND;
}

/* Load lib into the current context (its memory taken) unless it is there. */
static CUresult library_resident(CUlibrary lib)
{
    CUcontext c = fake_current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!lib->loaded) {
        if (lib->bytes && fake_device_reserve(c->dev, lib->bytes) != 0)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            lib->loaded = c;
            lib->dev = c->dev;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
    pthread_mutex_lock(&lock);
    size_t i;
    for (i = 0; i < sizeof libs / sizeof libs[0] && libs[i] != lib; i++)
        ;
    if (!lib || i == sizeof libs / sizeof libs[0]) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    libs[i] = NULL;
    pthread_mutex_unlock(&lock);
    if (lib->loaded && lib->bytes)
        fake_device_release(lib->dev, lib->bytes);
    lib->magic = 0; /* kernels of it are dangling now, as with the driver */
    free(lib);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
    if (!k || !lib || lib->magic != LIB_MAGIC || !name)
        return CUDA_ERROR_INVALID_VALUE;
    CUkernel kern = calloc(1, sizeof *kern); /* leaked like a driver's kernel table: small */
    if (!kern)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *kern = (struct CUkern_st){KERN_MAGIC, lib};
    *k = kern;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
    if (!f || !k || k->magic != KERN_MAGIC || !k->lib || k->lib->magic != LIB_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = library_resident(k->lib);
    if (rc == CUDA_SUCCESS)
        *f = (CUfunction)&the_function;
    return rc;
}

EXPORT CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib)
{
    if (!m || !lib || lib->magic != LIB_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = library_resident(lib);
    if (rc == CUDA_SUCCESS) {
        lib->module = (struct CUmod_st){MOD_MAGIC, 1, lib->dev, lib->loaded, 0, lib};
        *m = &lib->module;
    }
    return rc;
}

/* ---- limits ---- */
static uint64_t threads(void)
{
    return fake_env_number("FAKE_RESIDENT_THREADS", 16384);
}

EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
    CUcontext c = fake_current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (limit == CU_LIMIT_STACK_SIZE) {
        uint64_t want = value > 1024 ? (value - 1024) * threads() : 0;
        if (want > c->stack_bytes && fake_device_reserve(c->dev, want - c->stack_bytes) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (want < c->stack_bytes)
            fake_device_release(c->dev, c->stack_bytes - want);
        c->stack_bytes = want;
        c->stack = value;
        return CUDA_SUCCESS;
    }
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
        c->heap = value;
        c->heap_pending = 1; /* taken at the next launch */
        return CUDA_SUCCESS;
    }
    return limit >= 0 && limit <= 6 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuCtxGetLimit(size_t *value, int limit)
{
    CUcontext c = fake_current_ctx();
    if (!value || !c)
        return !c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
    *value = limit == CU_LIMIT_STACK_SIZE ? c->stack : limit == CU_LIMIT_MALLOC_HEAP_SIZE ? c->heap : 0;
    return CUDA_SUCCESS;
}

/* What a launch takes that no call before it did: a library's lazy load, the device heap. */
void fake_launch_loads(CUfunction f)
{
    const struct CUkern_st *k = (const struct CUkern_st *)f;
    if (k && k->magic == KERN_MAGIC && k->lib && k->lib->magic == LIB_MAGIC)
        library_resident(k->lib);
    CUcontext c = fake_current_ctx();
    if (c && c->heap_pending) {
        uint64_t want = c->heap > 8 * FAKE_MIB ? c->heap - 8 * FAKE_MIB : 0;
        if (want > c->heap_bytes && fake_device_reserve(c->dev, want - c->heap_bytes) == 0)
            c->heap_bytes = want;
        c->heap_pending = 0;
    }
}

void fake_context_limits_gone(CUcontext c)
{
    fake_device_release(c->dev, c->stack_bytes + c->heap_bytes);
    c->stack_bytes = c->heap_bytes = 0;
}

void fake_modules_context_gone(CUcontext c)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++)
        if (mods[i] && mods[i]->ctx == c) {
            fake_device_release(mods[i]->dev, mods[i]->bytes);
            mods[i]->bytes = 0; /* the handle stays until unloaded; its memory is gone */
        }
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
        if (libs[i] && libs[i]->loaded == c) {
            fake_device_release(libs[i]->dev, libs[i]->bytes);
            libs[i]->loaded = NULL;
        }
    pthread_mutex_unlock(&lock);
}

void fake_modules_forget(void)
{
    memset(mods, 0, sizeof mods);
    memset(libs, 0, sizeof libs);
    pthread_mutex_init(&lock, NULL);
}
