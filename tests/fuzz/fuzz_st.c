/*
** tests/fuzz/fuzz_st.c — libFuzzer target for the safetensors reader (runtime/formats/st.c): the input is
** written to a memfd and opened through /proc/self/fd with st_open_file; when it opens, every
** tensor's bytes are touched and the float types converted. Build and run with tests/fuzz/run.sh.
*/
#include "st.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Read every tensor a caller could read. */
static void touch(const StDir *d)
{
	volatile double sink = 0;
	for (int i = 0; i < d->ntensor; i++) {
		const StTensor *t = &d->t[i];
		if (st_find(d, t->name) == NULL)
			abort();
		const uint8_t *p = st_data(d, t);
		if (t->nbytes) {
			sink += p[0];
			sink += p[t->nbytes - 1];
		}
		size_t es = st_type_size(t->dtype);
		if ((t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) && es && t->nbytes / es <= 1 << 16) {
			size_t n = t->nbytes / es;
			float *y = malloc((n ? n : 1) * sizeof *y);
			if (y) {
				st_to_f32(y, p, t->dtype, n);
				free(y);
			}
		}
	}
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_st", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	char path[64], err[512];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	StDir d;
	memset(&d, 0, sizeof d);
	err[0] = 0;
	if (off == size && st_open_file(&d, path, err, sizeof err) == 0) {
		touch(&d);
		st_close(&d);
	} else if (off == size && (!err[0] || strchr(err, '\n'))) {
		abort();
	}
	close(fd);
	return 0;
}
