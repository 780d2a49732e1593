/*
** runtime/gpu/libnvrtc.h — NVRTC, for glmc (compiling a plan's kernels) and glmrun (recompiling a plan without a
** cubin for its GPU).
*/
#ifndef GLM_LIBNVRTC_H
#define GLM_LIBNVRTC_H

#include <stddef.h>

/* 1 when libnvrtc can be loaded. */
int nvrtc_available(void);
/* Compile src for arch ("sm_90") to a malloc'd cubin. Errors quote the generated source line. */
int nvrtc_compile(const char *src, const char *arch, unsigned char **cubin, size_t *n, char *err, size_t len);

#endif
