/* The PTX kernels that vgpu-memory-usage and the tests launch (real PTX: a GPU compiles it, the
 * fake driver reads it): src/memory_usage.c, tests/client.c, tests/client_launch.c,
 * tests/truth_random.c and tests/gpu/launch_reservations.c. */
#ifndef VGPU_PTX_H
#define VGPU_PTX_H
#include <stdio.h>

/* A module whose one .global array is mib MiB, which its kernel k writes. */
static inline const char *ptx_with_global(size_t mib)
{
    static char ptx[1024];
    snprintf(ptx, sizeof ptx,
             ".version 7.0\n.target sm_50\n.address_size 64\n.visible .global .align 8 .b8 g[%zu];\n"
             ".visible .entry k()\n{\n\t.reg .b64 %%rd<2>;\n\t.reg .b16 %%rs<2>;\n\tmov.u64 %%rd1, g;\n"
             "\tmov.u16 %%rs1, 1;\n\tst.global.u8 [%%rd1], %%rs1;\n\tret;\n}\n",
             mib << 20);
    return ptx;
}

/* A module whose kernel lk(u64 out, u32 idx) uses local_bytes of local memory a thread (an array
 * written at an index the compiler cannot know, so it stays in local memory), and calls malloc
 * when heap is set (the device heap is taken at its first launch). Launch it with idx 0. */
static inline const char *ptx_with_local(size_t local_bytes, int heap)
{
    static char ptx[4096];
    snprintf(ptx, sizeof ptx,
             ".version 7.0\n.target sm_50\n.address_size 64\n"
             ".extern .func (.param .b64 func_retval0) malloc (.param .b64 p0);\n"
             ".extern .func free (.param .b64 p0);\n"
             ".visible .entry lk(.param .u64 out, .param .u32 idx)\n{\n"
             "\t.local .align 4 .b8 buf[%zu];\n\t.reg .pred %%p<2>;\n\t.reg .b32 %%r<4>;\n\t.reg .b64 %%rd<8>;\n"
             "\tld.param.u32 %%r1, [idx];\n\tmov.u32 %%r2, %%tid.x;\n\tmov.u64 %%rd1, buf;\n"
             "\tcvt.u64.u32 %%rd2, %%r1;\n\tadd.s64 %%rd3, %%rd1, %%rd2;\n\tst.local.u32 [%%rd3], %%r2;\n"
             "\tld.local.u32 %%r3, [%%rd1+4];\n%s"
             "\tsetp.ne.u32 %%p1, %%r1, 12345678;\n\t@%%p1 bra DONE;\n"
             "\tld.param.u64 %%rd4, [out];\n\tcvta.to.global.u64 %%rd5, %%rd4;\n\tst.global.u32 [%%rd5], %%r3;\n"
             "DONE:\n\tret;\n}\n",
             local_bytes > 8 ? local_bytes : 8,
             heap ? "\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], 64;\n\t.param .b64 retval0;\n"
                    "\tcall.uni (retval0), malloc, (param0);\n\tld.param.b64 %rd6, [retval0+0];\n\t}\n"
                    "\t{\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd6;\n\tcall.uni free, (param0);\n\t}\n"
                  : "");
    return ptx;
}
#endif
