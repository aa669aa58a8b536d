/* Finding the real driver library by absolute path, never ourselves: the override variable,
 * then libX.so.<driver version> and the soname in the folders of the ld.so cache,
 * LD_LIBRARY_PATH and the standard driver folders. A candidate that is (a copy of) libvgpu is
 * refused by inode, by folder (/opt/vgpu and our own) and by the vgpu_shim_marker symbol. */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu.h"

/* Exported by every libvgpu library so that a candidate can be recognised as one of ours. */
VGPU_EXPORT const char vgpu_shim_marker[] = "libvgpu";

static const char *const standard_dirs[] = {
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
    "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/nvidia", "/usr/lib64/nvidia", "/usr/lib/wsl/lib", "/lib64", "/lib",
};

static void driver_version(char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/driver/nvidia/version", "re");
    if (!f)
        return;
    char line[512];
    if (fgets(line, sizeof line, f)) {
        /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ..." */
        for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
            int dots = 0, ok = 1;
            for (char *c = tok; *c; c++) {
                if (*c == '.')
                    dots++;
                else if (*c < '0' || *c > '9')
                    ok = 0;
            }
            if (ok && dots >= 1 && tok[0] != '.') {
                snprintf(out, len, "%s", tok);
                break;
            }
        }
    }
    fclose(f);
}

struct search {
    const char *soname;   /* libcuda.so.1 */
    char versioned[128];  /* libcuda.so.580.95.05, or empty */
    struct stat self;     /* our own file */
    char self_dir[PATH_MAX];
    void *handle;
    char tried[1024];
};

static int is_ours(struct search *s, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 1;
    if (st.st_dev == s->self.st_dev && st.st_ino == s->self.st_ino)
        return 1;
    char real[PATH_MAX];
    if (!realpath(path, real))
        return 1;
    if (strncmp(real, "/opt/vgpu/", 10) == 0)
        return 1;
    size_t n = strlen(s->self_dir);
    if (n && strncmp(real, s->self_dir, n) == 0 && real[n] == '/' && !strchr(real + n + 1, '/'))
        return 1;
    return 0;
}

static int try_path(struct search *s, const char *path)
{
    if (s->handle || is_ours(s, path))
        return s->handle != NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        vgpu_log(VGPU_DEBUG, "dlopen %s: %s", path, dlerror());
        return 0;
    }
    if (dlsym(h, "vgpu_shim_marker")) {
        dlclose(h);
        return 0;
    }
    vgpu_log(VGPU_INFO, "real %s is %s", s->soname, path);
    s->handle = h;
    return 1;
}

static int try_dir(struct search *s, const char *dir, size_t dirlen)
{
    char path[PATH_MAX];
    if (!dirlen || dirlen > PATH_MAX - 160)
        return 0;
    if (s->versioned[0]) {
        snprintf(path, sizeof path, "%.*s/%s", (int)dirlen, dir, s->versioned);
        if (try_path(s, path))
            return 1;
    }
    snprintf(path, sizeof path, "%.*s/%s", (int)dirlen, dir, s->soname);
    return try_path(s, path);
}

/* The new-format ld.so cache ("glibc-ld.so.cache1.1"): entries of {flags, key, value,
 * osversion, hwcap}, strings addressed from the start of the new header. */
static int try_ld_cache(struct search *s)
{
    int fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 64) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    const char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 0;
    static const char magic[] = "glibc-ld.so.cache1.1";
    const char *hdr = memmem(map, size, magic, sizeof magic - 1);
    int found = 0;
    if (hdr && (size_t)(hdr - map) + 48 <= size) {
        uint32_t nlibs;
        memcpy(&nlibs, hdr + 20, 4);
        size_t avail = size - (size_t)(hdr - map);
        for (uint32_t i = 0; i < nlibs && !found; i++) {
            size_t off = 48 + (size_t)i * 24;
            if (off + 24 > avail)
                break;
            uint32_t key, value;
            memcpy(&key, hdr + off + 4, 4);
            memcpy(&value, hdr + off + 8, 4);
            if (key >= avail || value >= avail || !memchr(hdr + key, 0, avail - key)
                || !memchr(hdr + value, 0, avail - value))
                continue;
            if (strcmp(hdr + key, s->soname) != 0)
                continue;
            const char *path = hdr + value;
            const char *slash = strrchr(path, '/');
            if (slash)
                found = try_dir(s, path, (size_t)(slash - path));
        }
    }
    munmap((void *)map, size);
    return found;
}

void *vgpu_open_real(const char *soname, const char *override_env, char *err, size_t errlen)
{
    const char *override = getenv(override_env);
    /* Under the device plugin's quota file the driver is the node's: a library of the
     * container's choosing could hide every call from the hooks or blind the GPU's count. */
    if (override && *override && vgpu_config_contract()) {
        vgpu_log(VGPU_WARN, "%s=\"%s\" ignored: the device plugin's quota file %s is present", override_env, override,
                 VGPU_QUOTA_FILE);
        override = NULL;
    }
    if (override && *override) {
        void *h = dlopen(override, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(err, errlen, "%s=\"%s\" cannot be loaded: %s", override_env, override, dlerror());
        else
            vgpu_log(VGPU_INFO, "real %s is %s (%s)", soname, override, override_env);
        return h;
    }

    struct search s;
    memset(&s, 0, sizeof s);
    s.soname = soname;
    char ver[64];
    driver_version(ver, sizeof ver);
    if (ver[0]) {
        /* libcuda.so.1 -> libcuda.so.<version> */
        const char *so = strstr(soname, ".so");
        snprintf(s.versioned, sizeof s.versioned, "%.*s.so.%s", (int)(so - soname), soname, ver);
    }
    Dl_info info;
    if (dladdr((void *)vgpu_open_real, &info) && info.dli_fname) {
        stat(info.dli_fname, &s.self);
        char real[PATH_MAX];
        if (realpath(info.dli_fname, real)) {
            char *slash = strrchr(real, '/');
            if (slash) {
                *slash = '\0';
                snprintf(s.self_dir, sizeof s.self_dir, "%s", real);
            }
        }
    }

    if (try_ld_cache(&s))
        return s.handle;
    const char *llp = getenv("LD_LIBRARY_PATH");
    while (llp && *llp) {
        const char *end = strchr(llp, ':');
        size_t n = end ? (size_t)(end - llp) : strlen(llp);
        if (try_dir(&s, llp, n))
            return s.handle;
        llp = end ? end + 1 : NULL;
    }
    for (size_t i = 0; i < sizeof standard_dirs / sizeof standard_dirs[0]; i++)
        if (try_dir(&s, standard_dirs[i], strlen(standard_dirs[i])))
            return s.handle;
    snprintf(err, errlen,
             "the real %s was not found (driver version \"%s\"; searched the ld.so cache, LD_LIBRARY_PATH and the "
             "standard driver folders); set %s to its absolute path",
             soname, ver, override_env);
    return NULL;
}
