/*
** tests/test_nvrtc.c — NVRTC as glmc uses it, no GPU needed: the embedded kernel templates compile for
** every supported arch, and a compile error is reported in one line quoting the generated source line.
*/
#include "check.h"
#include "glm.h"

#include <string.h>

int main(void)
{
	char err[1024];
	check(nvrtc_available(), "NVRTC can be loaded", "libnvrtc.so not found (CUDA toolkit missing?)");
	if (!nvrtc_available())
		return check_done();
	unsigned char *cubin = NULL;
	size_t n = 0;
	const char *bad = "extern \"C\" __global__ void broken(float *y)\n{\n\ty[0] = undefined_name + 1;\n}\n";
	int rc = nvrtc_compile(bad, "sm_90", &cubin, &n, err, sizeof err);
	check(rc < 0 && strstr(err, "undefined_name") && strstr(err, "generated line: y[0] = undefined_name + 1;") &&
	          !strchr(err, '\n'),
	      "compile error quotes the generated line", "%s", err);
	/* The templates alone (no instantiation) must parse for each arch glmc accepts. */
	static const char *arch[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};
	for (int i = 0; i < 6; i++) {
		char name[64];
		snprintf(name, sizeof name, "kernel templates compile for %s", arch[i]);
		cubin = NULL;
		rc = nvrtc_compile(glm_kernels_cuh, arch[i], &cubin, &n, err, sizeof err);
		check(rc == 0 && cubin && n > 0, name, "%s", err);
		free(cubin);
	}
	return check_done();
}
