/* Process identity from /proc, shared by libvgpu and its fake driver. */
#include <fcntl.h>
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
