/*
** runtime/gpu/libcuda.c — the CUDA driver's table (libcuda.h): every entry point glmrun uses, resolved at
** start-up by its versioned name, so an old driver is reported before anything runs.
*/
#include "libcuda.h"
#include "glm.h"

#include <dlfcn.h>
#include <string.h>

/* Load libcuda and every symbol; a machine without the driver gets one clear line. */
int cu_load(Cu *cu, char *err, size_t len)
{
	memset(cu, 0, sizeof *cu);
	cu->so = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu->so)
		return seterr(err, len, "--device cuda: no NVIDIA driver found (libcuda.so.1 cannot be loaded); run with "
		              "--device cpu");
#define SYM(f, name)                                                                               \
	if (!(*(void **)&cu->f = dlsym(cu->so, name)))                                                  \
		return seterr(err, len, "--device cuda: the NVIDIA driver lacks %s (driver too old?)", name);
	SYM(init, "cuInit");
	SYM(errstr, "cuGetErrorString");
	SYM(dev_count, "cuDeviceGetCount");
	SYM(dev_get, "cuDeviceGet");
	SYM(dev_name, "cuDeviceGetName");
	SYM(dev_attr, "cuDeviceGetAttribute");
	SYM(ctx_retain, "cuDevicePrimaryCtxRetain");
	SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2");
	SYM(ctx_set, "cuCtxSetCurrent");
	SYM(mem_info, "cuMemGetInfo_v2");
	SYM(alloc, "cuMemAlloc_v2");
	SYM(free, "cuMemFree_v2");
	SYM(alloc_host, "cuMemAllocHost_v2");
	SYM(free_host, "cuMemFreeHost");
	SYM(htod, "cuMemcpyHtoD_v2");
	SYM(dtoh, "cuMemcpyDtoH_v2");
	SYM(htod_async, "cuMemcpyHtoDAsync_v2");
	SYM(dtoh_async, "cuMemcpyDtoHAsync_v2");
	SYM(memset8, "cuMemsetD8_v2");
	SYM(mod_load, "cuModuleLoadData");
	SYM(mod_unload, "cuModuleUnload");
	SYM(mod_fn, "cuModuleGetFunction");
	SYM(fn_attr, "cuFuncGetAttribute");
	SYM(fn_set, "cuFuncSetAttribute");
	SYM(launch, "cuLaunchKernel");
	*(void **)&cu->launch_ex = dlsym(cu->so, "cuLaunchKernelEx"); /* absent: every launch waits in full */
	SYM(stream_create, "cuStreamCreate");
	SYM(stream_destroy, "cuStreamDestroy_v2");
	SYM(stream_sync, "cuStreamSynchronize");
	SYM(capture_begin, "cuStreamBeginCapture_v2");
	SYM(capture_end, "cuStreamEndCapture");
	SYM(graph_inst, "cuGraphInstantiateWithFlags");
	SYM(graph_launch, "cuGraphLaunch");
	SYM(graph_exec_destroy, "cuGraphExecDestroy");
	SYM(graph_destroy, "cuGraphDestroy");
	SYM(event_create, "cuEventCreate");
	SYM(event_destroy, "cuEventDestroy_v2");
	SYM(event_record, "cuEventRecord");
	SYM(event_record_flags, "cuEventRecordWithFlags");
	SYM(event_sync, "cuEventSynchronize");
	SYM(event_elapsed, "cuEventElapsedTime_v2");
	SYM(can_peer, "cuDeviceCanAccessPeer");
	SYM(enable_peer, "cuCtxEnablePeerAccess");
	*(void **)&cu->occupancy = dlsym(cu->so, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
#undef SYM
	return 0;
}
