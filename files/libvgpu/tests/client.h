/* What the test client's files share (client.c, client_launch.c). */
#ifndef VGPU_TEST_CLIENT_H
#define VGPU_TEST_CLIENT_H
#include "abi.h"

/* The driver function name as the loader finds libcuda.so.1 (exits 3 when it is missing). */
void *client_cuda_fn(const char *name);
#define CU(name, args) ((CUresult(*) args)client_cuda_fn(#name))
#define CU_AS(name, type) ((type)client_cuda_fn(#name))

/* The launch steps (client_launch.c): 1 when step is one of them. */
int client_launch_step(const char *step, const char *arg1, const char *arg2);
#endif
