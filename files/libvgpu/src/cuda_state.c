/* The CUDA shim's state, which every other cuda_*.c reads and none of them owns: the real driver's
 * entry points (filled by cuda_loader.c), the process's configuration and region, and the table of
 * covered launch targets (cuda_launch.c, cuda_graph_kernels.c). It calls nothing. */
#include "cuda_shim.h"

#define NAME_ENTRY(n) #n,
const char *const vgpu_cuda_names[H_COUNT] = {VGPU_CUDA_HOOKS(NAME_ENTRY) VGPU_CUDA_CALLS(NAME_ENTRY)};
void *vgpu_cuda_real[H_COUNT];
struct vgpu_cuda_state vgpu_cuda = {.slot = -1};

CUresult vgpu_cuda_not_supported(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

uint64_t vgpu_covered[VGPU_COVERED];
uint64_t vgpu_launch_generation = 1;
