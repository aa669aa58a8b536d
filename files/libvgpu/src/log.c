/* Logging to stderr, level from VGPU_LOG_LEVEL (0 errors .. 3 debug, default 1). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "vgpu.h"

static int log_level(void)
{
    static int level = -1;
    if (level < 0) {
        const char *v = getenv("VGPU_LOG_LEVEL");
        level = (v && *v >= '0' && *v <= '9') ? (int)vgpu_decimal(v, NULL) : VGPU_WARN;
    }
    return level;
}

void vgpu_log(int level, const char *fmt, ...)
{
    if (level > log_level())
        return;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "vgpu[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf)
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", buf);
}
