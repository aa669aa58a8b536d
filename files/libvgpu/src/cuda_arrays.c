/* CUDA arrays and mipmapped arrays (and the 32-bit cuArrayCreate, cuArray3DCreate), charged at
 * their element size times their extent (every level of a mipmap); the driver's padding is not
 * known, so block-compressed formats err high. */
#include "cuda_shim.h"

static uint64_t format_bytes(int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4; /* 32-bit formats; the block-compressed ones are smaller, this errs high */
    }
}

/* Bytes of a w x h x d array (0 = overflow). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned channels)
{
    uint64_t b = format_bytes(format) * (channels ? channels : 1), r;
    if (__builtin_mul_overflow(b, (uint64_t)w, &r) || __builtin_mul_overflow(r, (uint64_t)(h ? h : 1), &r)
        || __builtin_mul_overflow(r, (uint64_t)(d ? d : 1), &r))
        return 0;
    return r;
}

VGPU_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    HOOK_ENTER(cuArrayCreate_v2, arr, desc);
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || vgpu_current_device(&dev) != 0)
        return REAL(cuArrayCreate_v2)(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, REAL(cuArrayCreate_v2)(arr, desc));
}

VGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    HOOK_ENTER(cuArray3DCreate_v2, arr, desc);
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || vgpu_current_device(&dev) != 0)
        return REAL(cuArray3DCreate_v2)(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, REAL(cuArray3DCreate_v2)(arr, desc));
}

/* The 32-bit entry points without _v2, charged like their twins. */
VGPU_EXPORT CUresult cuArrayCreate(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    HOOK_ENTER(cuArrayCreate, arr, desc);
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || vgpu_current_device(&dev) != 0)
        return REAL(cuArrayCreate)(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, REAL(cuArrayCreate)(arr, desc));
}

VGPU_EXPORT CUresult cuArray3DCreate(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    HOOK_ENTER(cuArray3DCreate, arr, desc);
    int dev;
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels) : 0;
    if (!arr || !bytes || vgpu_current_device(&dev) != 0)
        return REAL(cuArray3DCreate)(arr, desc);
    ALLOC_BODY(VGPU_K_ARRAY, *arr, bytes, dev, REAL(cuArray3DCreate)(arr, desc));
}

VGPU_EXPORT CUresult cuArrayDestroy(CUarray arr)
{
    HOOK_ENTER(cuArrayDestroy, arr);
    FREE_BODY(VGPU_K_ARRAY, arr, REAL(cuArrayDestroy)(arr));
}

VGPU_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                            unsigned int levels)
{
    HOOK_ENTER(cuMipmappedArrayCreate, arr, desc, levels);
    int dev;
    uint64_t bytes = 0;
    for (unsigned l = 0; desc && l < levels && l < 64; l++) {
        size_t w = desc->Width >> l, h = desc->Height >> l, d = desc->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, desc->Height ? (h ? h : 1) : 0, desc->Depth ? (d ? d : 1) : 0,
                                 desc->Format, desc->NumChannels);
        if (!b || __builtin_add_overflow(bytes, b, &bytes)) {
            bytes = 0;
            break;
        }
    }
    if (!arr || !bytes || vgpu_current_device(&dev) != 0)
        return REAL(cuMipmappedArrayCreate)(arr, desc, levels);
    ALLOC_BODY(VGPU_K_MIPMAP, *arr, bytes, dev, REAL(cuMipmappedArrayCreate)(arr, desc, levels));
}

VGPU_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    HOOK_ENTER(cuMipmappedArrayDestroy, arr);
    FREE_BODY(VGPU_K_MIPMAP, arr, REAL(cuMipmappedArrayDestroy)(arr));
}
