/* Names shared between the hooks and the generated forwarding code. */
#ifndef VGPU_HOOKS_H
#define VGPU_HOOKS_H
#include "vgpu.h"

extern VGPU_HIDDEN const char *const vgpu_fwd_names_cuda[];
extern VGPU_HIDDEN void *vgpu_fwd_table_cuda[];
extern VGPU_HIDDEN const unsigned vgpu_fwd_count_cuda;
extern VGPU_HIDDEN const char *const vgpu_fwd_names_nvml[];
extern VGPU_HIDDEN void *vgpu_fwd_table_nvml[];

VGPU_HIDDEN void *vgpu_fwd_resolve_cuda(unsigned index);
VGPU_HIDDEN void *vgpu_fwd_resolve_nvml(unsigned index);
VGPU_HIDDEN void *vgpu_cuda_hook_for(void *real);
VGPU_HIDDEN void *vgpu_nvml_hook_for(void *real);
#endif
