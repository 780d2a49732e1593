/*
** runtime/gpu/libcuda.h — the CUDA driver, opened with dlopen so glmrun starts on machines without a GPU and
** says so in one line when asked for one. Only cuda.h's types and prototypes are used; libcuda is never linked.
*/
#ifndef GLM_LIBCUDA_H
#define GLM_LIBCUDA_H

#include <cuda.h>
#include <stddef.h>

/* The driver entry points glmrun uses, resolved by their versioned names. */
typedef struct {
	void *so;
	__typeof__(cuInit) *init;
	__typeof__(cuGetErrorString) *errstr;
	__typeof__(cuDeviceGetCount) *dev_count;
	__typeof__(cuDeviceGet) *dev_get;
	__typeof__(cuDeviceGetName) *dev_name;
	__typeof__(cuDeviceGetAttribute) *dev_attr;
	__typeof__(cuDevicePrimaryCtxRetain) *ctx_retain;
	__typeof__(cuDevicePrimaryCtxRelease_v2) *ctx_release;
	__typeof__(cuCtxSetCurrent) *ctx_set;
	__typeof__(cuMemGetInfo_v2) *mem_info;
	__typeof__(cuMemAlloc_v2) *alloc;
	__typeof__(cuMemFree_v2) *free;
	__typeof__(cuMemAllocHost_v2) *alloc_host;
	__typeof__(cuMemFreeHost) *free_host;
	__typeof__(cuMemcpyHtoD_v2) *htod;
	__typeof__(cuMemcpyDtoH_v2) *dtoh;
	__typeof__(cuMemcpyHtoDAsync_v2) *htod_async;
	__typeof__(cuMemcpyDtoHAsync_v2) *dtoh_async;
	__typeof__(cuMemsetD8_v2) *memset8;
	__typeof__(cuModuleLoadData) *mod_load;
	__typeof__(cuModuleUnload) *mod_unload;
	__typeof__(cuModuleGetFunction) *mod_fn;
	__typeof__(cuFuncGetAttribute) *fn_attr;
	__typeof__(cuFuncSetAttribute) *fn_set;
	__typeof__(cuLaunchKernel) *launch;
	__typeof__(cuLaunchKernelEx) *launch_ex; /* optional: programmatic dependent launch */
	__typeof__(cuStreamCreate) *stream_create;
	__typeof__(cuStreamDestroy_v2) *stream_destroy;
	__typeof__(cuStreamSynchronize) *stream_sync;
	__typeof__(cuStreamBeginCapture_v2) *capture_begin;
	__typeof__(cuStreamEndCapture) *capture_end;
	__typeof__(cuGraphInstantiateWithFlags) *graph_inst;
	__typeof__(cuGraphLaunch) *graph_launch;
	__typeof__(cuGraphExecDestroy) *graph_exec_destroy;
	__typeof__(cuGraphDestroy) *graph_destroy;
	__typeof__(cuEventCreate) *event_create;     /* events: --profile */
	__typeof__(cuEventDestroy_v2) *event_destroy;
	__typeof__(cuEventRecord) *event_record;
	__typeof__(cuEventRecordWithFlags) *event_record_flags;
	__typeof__(cuEventSynchronize) *event_sync;
	__typeof__(cuEventElapsedTime) *event_elapsed;
	__typeof__(cuDeviceCanAccessPeer) *can_peer;
	__typeof__(cuCtxEnablePeerAccess) *enable_peer;
	/* optional: the persistent decode kernel's residency check (absent: glmrun runs the kernels) */
	__typeof__(cuOccupancyMaxActiveBlocksPerMultiprocessor) *occupancy;
} Cu;

/* Load libcuda and every symbol into cu; a machine without the driver gets one clear line in err. */
int cu_load(Cu *cu, char *err, size_t len);

#endif
