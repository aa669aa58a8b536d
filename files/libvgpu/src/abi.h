/* The few CUDA driver and NVML ABI types libvgpu needs, declared here so that the build needs
 * no CUDA toolkit. Values and layouts follow cuda.h / nvml.h (stable since CUDA 11). */
#ifndef VGPU_ABI_H
#define VGPU_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUmod_st *CUmodule;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef unsigned int CUdeviceptr_v1; /* the 32-bit ABI of the entry points without _v2 */

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_SUPPORTED 801

typedef struct {
    char bytes[16];
} CUuuid;

typedef enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;

typedef struct {
    size_t Width;
    size_t Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
    unsigned int Width;
    unsigned int Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;

typedef struct {
    unsigned int Width;
    unsigned int Height;
    unsigned int Depth;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;

typedef struct {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

#define CU_MEM_LOCATION_TYPE_DEVICE 1
typedef struct {
    int type;
    int id;
} CUmemLocation;

typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

/* Graph memory nodes (cuda.h, CUDA 11.4+). CUmemPoolProps is 88 bytes in every version: its
 * tail was reserved[64] until CUDA 12.1, then maxSize, usage and reserved[54]. */
#define CU_GRAPH_NODE_TYPE_KERNEL 0
#define CU_GRAPH_NODE_TYPE_MEMSET 2
#define CU_GRAPH_NODE_TYPE_GRAPH 4
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10
#define CU_GRAPH_NODE_TYPE_MEM_FREE 11
#define CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT 0
#define CU_GRAPH_MEM_ATTR_USED_MEM_HIGH 1
#define CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT 2
#define CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH 3
#define CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 1
#define CU_STREAM_CAPTURE_STATUS_NONE 0
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0

typedef struct {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    unsigned char reserved[64];
} CUmemPoolProps;

typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

/* Stream-ordered pools (cuMemPoolGetAttribute / SetAttribute) */
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5
#define CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH 6
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT 7
#define CU_MEMPOOL_ATTR_USED_MEM_HIGH 8
#define CU_MEM_ALLOCATION_TYPE_PINNED 1

/* cuCtxSetLimit */
#define CU_LIMIT_STACK_SIZE 0
#define CU_LIMIT_PRINTF_FIFO_SIZE 1
#define CU_LIMIT_MALLOC_HEAP_SIZE 2
#define CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT 4

/* Launches: what a function needs, what a device holds resident */
#define CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES 3
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR 39
/* The stream handles that name no stream object (cuda.h CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) */
#define VGPU_SPECIAL_STREAMS 2

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef struct {
    CUfunction function;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} CUDA_LAUNCH_PARAMS;

/* A kernel node's parameters: v1 (cuGraphAddKernelNode, R470); v2 adds the kernel and its
 * context (CUDA 12), and is the kernel member of CUgraphNodeParams (v3, the same layout). */
typedef struct {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void **kernelParams;
    void **extra;
} CUDA_KERNEL_NODE_PARAMS_v1;
typedef struct {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;
/* cuGraphExecNodeSetParams's argument (CUDA 12.2): the node type, then its parameters. */
typedef struct {
    int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_KERNEL_NODE_PARAMS_v2 kernel;
    } u;
    long long reserved2;
} CUgraphNodeParams;

/* Shareable handles of the virtual memory API */
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1

/* Legacy IPC: 64 opaque bytes */
typedef struct {
    char reserved[64];
} CUipcMemHandle;

typedef struct {
    unsigned int numDevices;
    size_t size;
    unsigned long long handleTypes;
    unsigned long long flags;
} CUmulticastObjectProp;

/* cuMemMapArrayAsync: one mapping (or unmapping) of a physical handle into a sparse array */
#define CU_MEM_OPERATION_TYPE_MAP 1
#define CU_MEM_OPERATION_TYPE_UNMAP 2
#define CU_MEM_HANDLE_TYPE_GENERIC 0
typedef struct {
    int resourceType;
    union {
        CUmipmappedArray mipmap;
        CUarray array;
    } resource;
    int subresourceType;
    union {
        struct {
            unsigned int level, layer, offsetX, offsetY, offsetZ, extentWidth, extentHeight, extentDepth;
        } sparseLevel;
        struct {
            unsigned int layer;
            unsigned long long offset, size;
        } miptail;
    } subresource;
    int memOperationType;
    int memHandleType;
    union {
        CUmemGenericAllocationHandle memHandle;
    } memHandle;
    unsigned long long offset;
    unsigned int deviceBitMask;
    unsigned int flags;
    unsigned int reserved[2];
} CUarrayMapInfo;

typedef struct {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr; /* out: the allocation's address */
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef struct {
    cuuint64_t flags;
    CUstream hUploadStream;
    CUgraphNode hErrNode_out;
    int result_out;
} CUDA_GRAPH_INSTANTIATE_PARAMS;

_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes, as in cuda.h");
_Static_assert(sizeof(CUarrayMapInfo) == 96, "CUarrayMapInfo is 96 bytes, as in cuda.h");
_Static_assert(__builtin_offsetof(CUarrayMapInfo, memHandle) == 64, "CUarrayMapInfo.memHandle at 64, as in cuda.h");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle is 64 bytes, as in cuda.h");
_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120, "CUDA_MEM_ALLOC_NODE_PARAMS is 120 bytes, as in cuda.h");

/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* NVML */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_UNKNOWN 999

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#endif
