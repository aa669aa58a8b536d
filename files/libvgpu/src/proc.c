/* Process identity from /proc, shared by libvgpu and its fake driver: a process is its pid and
 * its start time, so a reused pid is never mistaken for the process that had it before. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vgpu.h"

uint64_t vgpu_proc_start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    /* after ") " come fields 3..; starttime is field 22 */
    p += 2;
    int field = 3;
    if (*p == 'Z' || *p == 'X')
        return 0;
    while (*p && field < 22) {
        if (*p++ == ' ')
            field++;
    }
    return (unsigned long long)vgpu_decimal(p, NULL);
}

void vgpu_proc_cgroup(int pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
}

int vgpu_proc_alive(int pid, uint64_t start_time, const char *cgroup)
{
    if (pid <= 0)
        return 0;
    uint64_t st = vgpu_proc_start_time(pid);
    if (st == 0) {
        /* no /proc entry (or a zombie): only kill() can still say it exists */
        if (access("/proc/self/stat", R_OK) == 0)
            return 0;
        return kill(pid, 0) == 0 || errno == EPERM;
    }
    if (start_time && st != start_time)
        return 0; /* pid reused by another process */
    if (cgroup && *cgroup) {
        char cg[256];
        vgpu_proc_cgroup(pid, cg, sizeof cg);
        if (strcmp(cg, cgroup) != 0)
            return 0;
    }
    return 1;
}
