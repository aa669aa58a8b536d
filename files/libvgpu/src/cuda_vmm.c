/* Physical handles of the virtual memory API (design.md, "What each path charges"). The driver
 * frees a cuMemCreate handle's memory when the handle is released AND its last mapping is
 * unmapped (the documented pattern releases the handle right after mapping it), and each
 * cuMemRetainAllocationHandle holds it with a reference of its own. So a handle is charged from
 * cuMemCreate until its references (create + retains) and its mappings are all gone. A handle
 * exported to a shareable handle, bound to a multicast object or mapped into a sparse array is
 * charged until the process exits (the importer, the multicast object or the array may hold it
 * after the exporter let go). Imported handles are the exporter's memory: not charged again. */
#include "cuda_shim.h"

static int drop_ref(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    if (e->refs)
        e->refs--;
    return !e->refs && !e->maps && !(e->flags & VGPU_F_PINNED);
}

static int add_ref(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->refs++;
    return 0;
}

static int drop_map(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    if (e->maps)
        e->maps--;
    return !e->refs && !e->maps && !(e->flags & VGPU_F_PINNED);
}

static int add_map(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->maps++;
    return 0;
}

static int pin(struct vgpu_track_entry *e, void *arg)
{
    (void)arg;
    e->flags |= VGPU_F_PINNED;
    return 0;
}

VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    HOOK_ENTER(cuMemCreate, handle, size, prop, flags);
    /* only device memory counts; host (NUMA) locations do not */
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || prop->location.id < 0 || prop->location.id >= VGPU_MAX_DEVICES)
        return REAL(cuMemCreate)(handle, size, prop, flags);
    int dev = prop->location.id;
    if (vgpu_admit(dev, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = REAL(cuMemCreate)(handle, size, prop, flags);
    if (rc != CUDA_SUCCESS) {
        vgpu_rollback(dev, size);
        return rc;
    }
    struct vgpu_track_entry e = {.key = *handle, .bytes = size, .dev = dev, .kind = VGPU_K_HANDLE, .refs = 1}, old;
    if (vgpu_track_put_entry(&e, &old) == 1)
        vgpu_released(old.dev, old.bytes); /* a handle value the driver reused */
    return rc;
}

/* The last reference taken before the driver call (so a reused handle value cannot race), put
 * back when the driver refuses. */
VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    HOOK_ENTER(cuMemRelease, handle);
    struct vgpu_track_entry e;
    int gone = vgpu_track_with(VGPU_K_HANDLE, handle, drop_ref, NULL, &e);
    if (gone < 0)
        return REAL(cuMemRelease)(handle);
    CUresult rc = REAL(cuMemRelease)(handle);
    if (rc != CUDA_SUCCESS) {
        if (gone == 1) {
            e.refs = 1;
            vgpu_track_put_entry(&e, &e);
        } else {
            vgpu_track_with(VGPU_K_HANDLE, handle, add_ref, NULL, NULL);
        }
    } else if (gone == 1) {
        vgpu_released(e.dev, e.bytes);
    }
    return rc;
}

VGPU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    HOOK_ENTER(cuMemRetainAllocationHandle, handle, addr);
    CUresult rc = REAL(cuMemRetainAllocationHandle)(handle, addr);
    if (rc == CUDA_SUCCESS && handle)
        vgpu_track_with(VGPU_K_HANDLE, *handle, add_ref, NULL, NULL);
    return rc;
}

VGPU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags)
{
    HOOK_ENTER(cuMemMap, ptr, size, offset, handle, flags);
    CUresult rc = REAL(cuMemMap)(ptr, size, offset, handle, flags);
    if (rc == CUDA_SUCCESS && vgpu_track_with(VGPU_K_HANDLE, handle, add_map, NULL, NULL) >= 0) {
        struct vgpu_track_entry m = {.key = ptr, .bytes = size, .aux = handle, .kind = VGPU_K_MAP}, old;
        vgpu_track_put_entry(&m, &old);
    }
    return rc;
}

/* The mappings of charged handles in [ptr, ptr + size), taken out first; the handles whose last
 * mapping this was (and that have no reference left) released after the driver unmapped. */
VGPU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    HOOK_ENTER(cuMemUnmap, ptr, size);
    struct vgpu_track_entry maps[64];
    unsigned n = 0;
    for (CUdeviceptr at = ptr; n < 64 && at < ptr + size && vgpu_track_take_entry(VGPU_K_MAP, at, &maps[n]) == 0;) {
        at += maps[n].bytes ? maps[n].bytes : size;
        n++;
    }
    CUresult rc = REAL(cuMemUnmap)(ptr, size);
    for (unsigned i = 0; i < n; i++) {
        if (rc != CUDA_SUCCESS) {
            vgpu_track_put_entry(&maps[i], &maps[i]);
            continue;
        }
        struct vgpu_track_entry h;
        if (vgpu_track_with(VGPU_K_HANDLE, maps[i].aux, drop_map, NULL, &h) == 1)
            vgpu_released(h.dev, h.bytes);
    }
    return rc;
}

VGPU_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle, int type,
                                                  unsigned long long flags)
{
    HOOK_ENTER(cuMemExportToShareableHandle, shareable, handle, type, flags);
    CUresult rc = REAL(cuMemExportToShareableHandle)(shareable, handle, type, flags);
    if (rc == CUDA_SUCCESS)
        vgpu_track_with(VGPU_K_HANDLE, handle, pin, NULL, NULL);
    return rc;
}

VGPU_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle, int type)
{
    HOOK_ENTER(cuMemImportFromShareableHandle, handle, os_handle, type);
    return REAL(cuMemImportFromShareableHandle)(handle, os_handle, type);
}

/* ---- multicast objects and sparse arrays hold the handles bound to them ---- */
static int maps_address(const struct vgpu_track_entry *e, void *addr)
{
    CUdeviceptr a = *(CUdeviceptr *)addr;
    return a >= e->key && a < e->key + e->bytes;
}

static void pin_at(CUdeviceptr addr)
{
    struct vgpu_track_entry m;
    if (vgpu_track_find(VGPU_K_MAP, maps_address, &addr, &m) == 0)
        vgpu_track_with(VGPU_K_HANDLE, m.aux, pin, NULL, NULL);
}

VGPU_EXPORT CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_offset,
                                        CUmemGenericAllocationHandle handle, size_t offset, size_t size,
                                        unsigned long long flags)
{
    HOOK_ENTER(cuMulticastBindMem, mc, mc_offset, handle, offset, size, flags);
    CUresult rc = REAL(cuMulticastBindMem)(mc, mc_offset, handle, offset, size, flags);
    if (rc == CUDA_SUCCESS)
        vgpu_track_with(VGPU_K_HANDLE, handle, pin, NULL, NULL);
    return rc;
}

VGPU_EXPORT CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_offset, CUdeviceptr ptr,
                                         size_t size, unsigned long long flags)
{
    HOOK_ENTER(cuMulticastBindAddr, mc, mc_offset, ptr, size, flags);
    CUresult rc = REAL(cuMulticastBindAddr)(mc, mc_offset, ptr, size, flags);
    if (rc == CUDA_SUCCESS)
        pin_at(ptr);
    return rc;
}

#define MAP_ARRAY(NAME)                                                                                               \
    VGPU_EXPORT CUresult NAME(CUarrayMapInfo *infos, unsigned int count, CUstream stream)                             \
    {                                                                                                                 \
        HOOK_ENTER(NAME, infos, count, stream);                                                                       \
        CUresult rc = REAL(NAME)(infos, count, stream);                                                               \
        for (unsigned i = 0; rc == CUDA_SUCCESS && infos && i < count; i++)                                           \
            if (infos[i].memOperationType == CU_MEM_OPERATION_TYPE_MAP                                                \
                && infos[i].memHandleType == CU_MEM_HANDLE_TYPE_GENERIC)                                              \
                vgpu_track_with(VGPU_K_HANDLE, infos[i].memHandle.memHandle, pin, NULL, NULL);                        \
        return rc;                                                                                                    \
    }
MAP_ARRAY(cuMemMapArrayAsync)
MAP_ARRAY(cuMemMapArrayAsync_ptsz)
