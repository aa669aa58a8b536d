/* Test aid, dlopened by the test client after libcuda.so.1 (the client's linger step): glibc runs
 * destructors of dlopened libraries in the order they were loaded, so this one runs after
 * libvgpu's, and the process stays alive VGPU_TEST_LINGER seconds still holding its GPU memory,
 * as any process does between its destructors and the driver freeing its memory. It says
 * "lingering" on stdout first. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((destructor)) static void linger(void)
{
    const char *s = getenv("VGPU_TEST_LINGER");
    if (!s || !*s)
        return;
    printf("lingering\n");
    fflush(stdout);
    sleep((unsigned)atoi(s));
}
