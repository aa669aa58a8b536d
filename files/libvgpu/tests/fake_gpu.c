/* The fake GPUs' configuration and node-wide state, shared by fake_cuda.c and fake_nvml.c.
 * Configuration: the file FAKE_GPU_CONF (default /etc/vgpu-fake-gpu.conf; key=value lines gpus,
 * total_mib, state, name), then the environment (FAKE_GPUS, FAKE_TOTAL_MIB, FAKE_STATE, FAKE_NAME)
 * over it.
 * NVIDIA_VISIBLE_DEVICES limits the GPUs a process has, as the NVIDIA container runtime does. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_gpu.h"
#include "vgpu.h"

#define ROOT_PIDNS 0xEFFFFFFCULL /* the kernel's PROC_PID_INIT_INO: the node's own pid namespace */

static struct fake_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

/* A whole decimal number in [lo, hi]. */
static int number(const char *s, long lo, long hi, long *out)
{
    char *end;
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int set(const char *key, const char *value, const char *where)
{
    long v;
    const char *expected;
    if (strcmp(key, "gpus") == 0) {
        expected = "a number of GPUs from 1 to 16";
        if (number(value, 1, FAKE_MAX_GPUS, &v) == 0) {
            cfg.gpus = (int)v;
            return 0;
        }
    } else if (strcmp(key, "total_mib") == 0) {
        expected = "the MiB of each GPU, from 1 to 16777216";
        if (number(value, 1, 1L << 24, &v) == 0) {
            cfg.total_bytes = (uint64_t)v << 20;
            return 0;
        }
    } else if (strcmp(key, "state") == 0) {
        expected = "an absolute path, or nothing for no state file";
        if (!*value || (value[0] == '/' && strlen(value) < sizeof cfg.state_path)) {
            snprintf(cfg.state_path, sizeof cfg.state_path, "%s", value);
            return 0;
        }
    } else if (strcmp(key, "name") == 0) {
        expected = "the GPUs' model, 1 to 63 printable characters";
        size_t n = strlen(value), printable = 0;
        while (printable < n && isprint((unsigned char)value[printable]))
            printable++;
        if (n > 0 && n < sizeof cfg.name && printable == n) {
            snprintf(cfg.name, sizeof cfg.name, "%s", value);
            return 0;
        }
    } else {
        expected = "one of the keys gpus, total_mib, state, name";
    }
    snprintf(cfg.err, sizeof cfg.err, "fake GPU: %s: %s=\"%s\" is invalid: expected %s", where, key, value, expected);
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int load_file(void)
{
    const char *path = getenv("FAKE_GPU_CONF");
    int explicit_path = path && *path;
    if (!explicit_path)
        path = FAKE_GPU_CONF;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (!explicit_path && errno == ENOENT)
            return 0;
        snprintf(cfg.err, sizeof cfg.err, "fake GPU: cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[700], where[600];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line), *eq = strchr(s, '=');
        if (!*s)
            continue;
        snprintf(where, sizeof where, "%s line %d", path, lineno);
        if (!eq) {
            snprintf(cfg.err, sizeof cfg.err, "fake GPU: %s: \"%s\" is not key=value", where, s);
            rc = -1;
            break;
        }
        *eq = '\0';
        rc = set(trim(s), trim(eq + 1), where);
    }
    fclose(f);
    return rc;
}

/* NVIDIA_VISIBLE_DEVICES: "all" = every GPU; empty, "none" or "void" = none (as the container
 * runtime reads them); else a comma list of indexes and UUIDs. Unset = every GPU: a process of
 * the node itself, not of a container. */
static int load_visible(void)
{
    const char *v = getenv("NVIDIA_VISIBLE_DEVICES");
    cfg.nvisible = 0;
    if (!v || strcmp(v, "all") == 0) {
        for (int i = 0; i < cfg.gpus; i++)
            cfg.visible[cfg.nvisible++] = i;
        return 0;
    }
    if (!*v || strcmp(v, "none") == 0 || strcmp(v, "void") == 0)
        return 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        item = trim(item);
        long idx = -1;
        if (number(item, 0, cfg.gpus - 1, &idx) != 0)
            for (int i = 0; i < cfg.gpus; i++) {
                char u[64];
                fake_uuid_text(i, u, sizeof u);
                if (strcmp(u, item) == 0)
                    idx = i;
            }
        if (idx < 0 || cfg.nvisible == FAKE_MAX_GPUS) {
            snprintf(cfg.err, sizeof cfg.err,
                     "fake GPU: NVIDIA_VISIBLE_DEVICES item \"%s\" names none of the %d fake GPUs (an index or a UUID)",
                     item, cfg.gpus);
            return -1;
        }
        cfg.visible[cfg.nvisible++] = (int)idx;
    }
    return 0;
}

static void load(void)
{
    cfg.gpus = 1;
    cfg.total_bytes = 8192ULL << 20;
    snprintf(cfg.name, sizeof cfg.name, "Fake GPU");
    if (load_file() != 0)
        return;
    static const char *const env[][2] = {
        {"FAKE_GPUS", "gpus"}, {"FAKE_TOTAL_MIB", "total_mib"}, {"FAKE_LEDGER", "state"}, {"FAKE_STATE", "state"},
        {"FAKE_NAME", "name"}};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        const char *v = getenv(env[i][0]);
        if (v && (*v || strcmp(env[i][1], "state") == 0) && set(env[i][1], v, env[i][0]) != 0)
            return;
    }
    if (load_visible() != 0)
        return;
    cfg.ok = 1;
}

const struct fake_config *fake_config(void)
{
    pthread_once(&cfg_once, load);
    if (!cfg.ok) {
        static int told;
        if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "%s\n", cfg.err);
    }
    return &cfg;
}

/* Stable and distinct: GPU 0 is 10111213-1415-..., GPU n starts with 0x10 + n. */
void fake_uuid(int phys, unsigned char out[16])
{
    for (int i = 0; i < 16; i++)
        out[i] = (unsigned char)(0x10 + i);
    out[0] = (unsigned char)(0x10 + phys);
}

void fake_uuid_text(int phys, char *out, size_t len)
{
    unsigned char u[16];
    fake_uuid(phys, u);
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* ---- the node-wide state file ---- */
static struct fake_state *state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void init_lock(struct fake_state *s)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->lock.mutex, &a);
    pthread_mutexattr_destroy(&a);
}

static void map_state(void)
{
    const struct fake_config *c = fake_config();
    if (!c->ok || !c->state_path[0])
        return;
    int fd = open(c->state_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    struct stat st;
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)
        || (st.st_size < (off_t)sizeof(struct fake_state) && ftruncate(fd, sizeof(struct fake_state)) != 0)) {
        fprintf(stderr, "fake GPU: state file %s is unusable: %s\n", c->state_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    (void)fchmod(fd, 0666); /* every uid of the node shares it */
    struct fake_state *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s != MAP_FAILED) {
        if (s->magic != FAKE_STATE_MAGIC || s->gpus != (uint32_t)c->gpus) {
            memset(s, 0, sizeof *s);
            s->gpus = (uint32_t)c->gpus;
            init_lock(s);
            s->magic = FAKE_STATE_MAGIC;
        }
        state = s;
    }
    flock(fd, LOCK_UN);
    close(fd);
}

struct fake_state *fake_state(void)
{
    pthread_once(&state_once, map_state);
    return state;
}

void fake_state_lock(struct fake_state *s)
{
    int rc = pthread_mutex_lock(&s->lock.mutex);
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent(&s->lock.mutex);
}

void fake_state_unlock(struct fake_state *s)
{
    pthread_mutex_unlock(&s->lock.mutex);
}

uint64_t fake_self_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t fake_start_time(uint32_t pid)
{
    return vgpu_proc_start_time((int)pid);
}

/* The pid, in our namespace, of the process that is p->pid in namespace p->pidns: the last
 * NSpid field of /proc/<pid>/status is the pid in the process's own namespace. */
static uint32_t find_in_other_ns(const struct fake_proc *p)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    uint32_t found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        long pid;
        if (number(e->d_name, 1, 1L << 30, &pid) != 0)
            continue;
        char path[64], line[256];
        struct stat st;
        snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
        if (stat(path, &st) != 0 || (uint64_t)st.st_ino != p->pidns)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/status", pid);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "NSpid:", 6) != 0)
                continue;
            char *last = strrchr(trim(line + 6), '\t');
            last = last ? last + 1 : trim(line + 6);
            if (strtoul(last, NULL, 10) == p->pid)
                found = (uint32_t)pid;
            break;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    return found;
}

uint32_t fake_proc_local_pid(const struct fake_proc *p)
{
    if (!p->live)
        return 0;
    if (p->pidns == fake_self_pidns())
        return p->pid;
    return find_in_other_ns(p);
}

void fake_state_add_heir_locked(struct fake_proc *p)
{
    uint32_t pid = (uint32_t)getpid();
    int k = 0;
    while (k < FAKE_HEIRS - 1 && p->heir_pid[k] && fake_start_time(p->heir_pid[k]) == p->heir_start[k])
        k++; /* a free or dead heir's place, else the last */
    p->heir_pid[k] = pid;
    p->heir_start[k] = fake_start_time(pid);
}

void fake_state_reap_locked(struct fake_state *s)
{
    uint64_t self_ns = fake_self_pidns();
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        struct fake_proc *p = &s->procs[i];
        if (!p->live)
            continue;
        uint32_t pid = fake_proc_local_pid(p);
        /* from the node's own namespace every process is visible: not found means gone */
        int dead = pid ? fake_start_time(pid) != p->start_time : self_ns == ROOT_PIDNS;
        for (int k = 0; dead && k < FAKE_HEIRS && p->pidns == self_ns; k++)
            dead = !p->heir_pid[k] || fake_start_time(p->heir_pid[k]) != p->heir_start[k];
        if (!dead)
            continue;
        for (int g = 0; g < FAKE_MAX_GPUS; g++) {
            s->used[g] -= p->bytes[g] < s->used[g] ? p->bytes[g] : s->used[g];
            s->now -= p->bytes[g] < s->now ? p->bytes[g] : s->now;
        }
        memset(p, 0, sizeof *p);
    }
}
