/* The fake CUDA driver's code and limits, with the real driver's costs (tests/README.md):
 *  - a module's static device memory is the sum of its PTX `.global` arrays (`.global .b8
 *    buf[1073741824];` costs 1 GiB), taken at cuModuleLoad* in the current context and given
 *    back at cuModuleUnload or when the context goes;
 *  - a library (cuLibraryLoad*) loads lazily: its memory is taken the first time it is needed in
 *    a context: cuKernelGetFunction, cuLibraryGetModule, or a launch of one of its kernels
 *    (cuLaunchKernel with a CUkernel, as cudart 12+ does);
 *  - the per-thread stack (CU_LIMIT_STACK_SIZE, 1 KiB by default, part of the context's cost)
 *    takes (size - 1 KiB) x FAKE_RESIDENT_THREADS (default 16384: 16 SMs of 1024 threads) of
 *    device memory. cuCtxSetLimit sets it; a launch (or a graph's instantiation) of a function
 *    whose local memory (the sum of its PTX `.local` arrays, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
 *    is larger grows it to that size and keeps it, as the H200 does (issue 37: 64 KiB a thread
 *    took 16632 MiB there);
 *  - the device heap (CU_LIMIT_MALLOC_HEAP_SIZE, 8 MiB by default) takes nothing when it is set
 *    and its size plus 2 MiB at the first launch of a function that calls malloc; after that it
 *    cannot be set again (CUDA_ERROR_INVALID_VALUE), as on the H200. */
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

/* A function: what its launch needs (its module's PTX says). */
struct CUfunc_st {
    unsigned magic;
    uint64_t local; /* per-thread local memory: the sum of the .local arrays */
    int heap;       /* it calls malloc */
};

/* What a PTX text declares. */
struct ptx_info {
    uint64_t globals, locals;
    int heap;
};

struct CUmod_st {
    unsigned magic;
    int live, dev;
    CUcontext ctx;
    uint64_t bytes;
    CUlibrary lib; /* a library's module (cuLibraryGetModule): unloaded with the library */
    struct CUfunc_st func;
};
struct CUlib_st {
    unsigned magic;
    int live;
    uint64_t bytes;    /* its .global arrays */
    struct CUfunc_st func;
    CUcontext loaded;  /* the context it is loaded into, NULL = not yet */
    int dev;
    struct CUmod_st module;
};
struct CUkern_st {
    unsigned magic;
    CUlibrary lib;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUmodule mods[1024];
/* Unloaded modules, given out again newest first: the driver gives a new module's function the
 * handle of one unloaded before (seen on an H100, driver 580: a launch then looked covered). */
static CUmodule spare[8];
static unsigned nspare;
static CUlibrary libs[1024];

/* The bytes of a declaration's array, "[N]" (or "[N][M]") times its element size. */
static uint64_t array_bytes(const char *decl, const char *br)
{
    uint64_t elem = 1; /* the type's bits / 8: .b8 .u16 .s32 .f64 ... */
    for (const char *t = strchr(decl, '.'); t; t = strchr(t + 1, '.'))
        if (t[1] && strchr("busf", t[1]) && t[2] >= '1' && t[2] <= '9')
            elem = strtoull(t + 2, NULL, 10) / 8 ? strtoull(t + 2, NULL, 10) / 8 : 1;
    for (const char *b = br; b; b = strchr(b + 1, '['))
        elem *= strtoull(b + 1, NULL, 10);
    return elem;
}

/* What a PTX text declares: its .global arrays (static device memory), its .local arrays (each
 * thread's local memory) and whether it calls malloc. */
static struct ptx_info ptx_scan(const char *ptx, size_t len)
{
    struct ptx_info info = {0, 0, 0};
    const char *end = ptx + len;
    for (const char *line = ptx; line && line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
        const char *br = strchr(buf, '[');
        int decl = br && !strstr(buf, ".entry") && !strstr(buf, ".func") && !strstr(buf, ".param");
        if (decl && strstr(buf, ".global"))
            info.globals += array_bytes(buf, br);
        else if (decl && strstr(buf, ".local"))
            info.locals += array_bytes(buf, br);
        if (strstr(buf, "call") && strstr(buf, "malloc"))
            info.heap = 1;
        line = nl ? nl + 1 : NULL;
    }
    return info;
}

/* What a module image declares: PTX text, or nothing for anything else (a cubin). */
static struct ptx_info image_info(const void *image)
{
    const char *text = image;
    if (!text || !strstr(text, ".version"))
        return (struct ptx_info){0, 0, 0};
    return ptx_scan(text, strlen(text));
}

static struct ptx_info file_info(const char *path, int *ok)
{
    FILE *f = path ? fopen(path, "re") : NULL;
    *ok = f != NULL;
    if (!f)
        return (struct ptx_info){0, 0, 0};
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return image_info(buf);
}

static CUresult module_load(CUmodule *m, struct ptx_info info)
{
    uint64_t bytes = info.globals;
    CUcontext c = fake_current_ctx();
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c)
        return fake_ready() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    CUmodule mod = nspare ? spare[--nspare] : calloc(1, sizeof *mod);
    pthread_mutex_unlock(&lock);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *mod = (struct CUmod_st){MOD_MAGIC, 1, c->dev, c, bytes, NULL, {FUNC_MAGIC, info.locals, info.heap}};
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
    return image ? module_load(m, image_info(image)) : CUDA_ERROR_INVALID_VALUE;
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
    struct ptx_info info = file_info(path, &ok);
    return ok ? module_load(m, info) : CUDA_ERROR_NOT_FOUND;
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
    uint64_t bytes = m->bytes;
    int dev = m->dev, kept = nspare < sizeof spare / sizeof spare[0];
    m->magic = 0;
    if (kept)
        spare[nspare++] = m;
    pthread_mutex_unlock(&lock);
    if (bytes)
        fake_device_release(dev, bytes);
    if (!kept)
        free(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (!f || !m || m->magic != MOD_MAGIC || !name)
        return CUDA_ERROR_INVALID_VALUE;
    *f = &m->func;
    return CUDA_SUCCESS;
}

/* ---- libraries: context-independent, loaded into a context on first need ---- */
static CUresult library_load(CUlibrary *l, struct ptx_info info)
{
    if (!l)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUlibrary lib = calloc(1, sizeof *lib);
    if (!lib)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *lib = (struct CUlib_st){
        .magic = LIB_MAGIC, .live = 1, .bytes = info.globals, .func = {FUNC_MAGIC, info.locals, info.heap}};
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
    return code ? library_load(l, image_info(code)) : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *path, int *jit_opts, void **jit_vals, unsigned njit,
                                      int *lib_opts, void **lib_vals, unsigned nlib)
{
    (void)jit_opts, (void)jit_vals, (void)njit, (void)lib_opts, (void)lib_vals, (void)nlib;
    int ok;
    struct ptx_info info = file_info(path, &ok);
    return ok ? library_load(l, info) : CUDA_ERROR_NOT_FOUND;
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
        *f = &k->lib->func;
    return rc;
}

EXPORT CUresult cuLibraryGetModule(CUmodule *m, CUlibrary lib)
{
    if (!m || !lib || lib->magic != LIB_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = library_resident(lib);
    if (rc == CUDA_SUCCESS) {
        lib->module = (struct CUmod_st){MOD_MAGIC, 1, lib->dev, lib->loaded, 0, lib, lib->func};
        *m = &lib->module;
    }
    return rc;
}

/* ---- limits, and what a launch grows ---- */
static uint64_t threads(void)
{
    return fake_env_number("FAKE_RESIDENT_THREADS", 16384);
}

/* The stack of context c at size bytes a thread: 0, or -1 when the device has no room. */
static int set_stack(CUcontext c, uint64_t size)
{
    uint64_t want = size > 1024 ? (size - 1024) * threads() : 0;
    if (want > c->stack_bytes && fake_device_reserve(c->dev, want - c->stack_bytes) != 0)
        return -1;
    if (want < c->stack_bytes)
        fake_device_release(c->dev, c->stack_bytes - want);
    c->stack_bytes = want;
    c->stack = size;
    return 0;
}

EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
    CUcontext c = fake_current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (limit == CU_LIMIT_STACK_SIZE) {
        /* "the device will block until all preceding requested tasks are complete" (cuCtxSetLimit):
         * a synchronize, where stream-ordered pools give back what they keep above their threshold */
        fake_pools_synchronized();
        return set_stack(c, value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
        if (c->heap_bytes) /* a kernel that calls malloc ran: the heap is fixed */
            return CUDA_ERROR_INVALID_VALUE;
        c->heap = value;
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

/* The function a launch of f runs: a module's function, or a library's kernel (loaded into the
 * current context first); NULL for anything else (launches of it take nothing). */
static const struct CUfunc_st *launched(CUfunction f, CUresult *rc)
{
    const struct CUkern_st *k = (const struct CUkern_st *)f;
    *rc = CUDA_SUCCESS;
    if (k && k->magic == KERN_MAGIC && k->lib && k->lib->magic == LIB_MAGIC) {
        *rc = library_resident(k->lib);
        return *rc == CUDA_SUCCESS ? &k->lib->func : NULL;
    }
    return f && f->magic == FUNC_MAGIC ? f : NULL;
}

CUresult fake_launch_grows(CUfunction f)
{
    CUresult rc;
    const struct CUfunc_st *fn = launched(f, &rc);
    CUcontext c = fake_current_ctx();
    if (rc != CUDA_SUCCESS || !fn || !c)
        return rc;
    if (fn->local > c->stack && set_stack(c, fn->local) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fn->heap && !c->heap_bytes) {
        if (fake_device_reserve(c->dev, c->heap + 2 * FAKE_MIB) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->heap_bytes = c->heap + 2 * FAKE_MIB;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev)
{
    if (!value || !fake_valid_dev(dev))
        return CUDA_ERROR_INVALID_VALUE;
    /* 16 SMs of FAKE_RESIDENT_THREADS / 16 threads: the threads a stack is reserved for */
    *value = attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT                ? 16
             : attr == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR ? (int)(threads() / 16)
                                                                            : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetAttribute(int *value, int attr, CUfunction f)
{
    if (!value || !f || f->magic != FUNC_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *value = attr == CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES ? (int)f->local : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuKernelGetAttribute(int *value, int attr, CUkernel k, CUdevice dev)
{
    (void)dev;
    if (!value || !k || k->magic != KERN_MAGIC || !k->lib || k->lib->magic != LIB_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *value = attr == CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES ? (int)k->lib->func.local : 0;
    return CUDA_SUCCESS;
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
