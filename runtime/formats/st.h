/*
** runtime/formats/st.h — Hugging Face checkpoint directories: config.json plus model.safetensors, or the sharded
** model.safetensors.index.json with its shard files. Files are memory-mapped; every header field is
** checked against the file (header length, offsets inside the data section, byte size equal to
** shape × dtype size, no overlaps) so a truncated or hostile file gets an error, never a crash.
*/
#ifndef GLM_ST_H
#define GLM_ST_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

enum { ST_F32, ST_F16, ST_BF16, ST_F8_E4M3, ST_I32, ST_I64, ST_I8, ST_U8, ST_BOOL, ST_F64, ST_NTYPES };

typedef struct {
	char *name;          /* tensor name as in the file */
	int dtype;           /* ST_* */
	int ndim;            /* 0..8 */
	int64_t shape[8];
	int file;            /* index into StDir.files */
	uint64_t off;        /* byte offset from the start of the file (8 + header_len + data_offsets[0]) */
	uint64_t nbytes;
} StTensor;

typedef struct {
	char *path;          /* mapped file path */
	const uint8_t *map;  /* whole file, read-only */
	size_t size;
} StFile;

typedef struct StDir {
	char *dir;           /* the directory given */
	json_t *config;      /* parsed config.json (owned) */
	int nfile;
	StFile *files;
	int ntensor;
	StTensor *t;         /* sorted by name */
} StDir;

/* Open a checkpoint directory. On failure returns -1 and writes a one-line message naming the file
** and what is wrong into err (e.g. "weights/model.safetensors: tensor 'x': data_offsets [0, 99] past
** end of data (96 bytes)"). */
int st_open_dir(StDir *d, const char *dir, char *err, size_t errlen);

/* Open a single .safetensors file (used by st_open_dir and by tests/fuzzers); config stays NULL. */
int st_open_file(StDir *d, const char *file, char *err, size_t errlen);

void st_close(StDir *d);

/* Lookup by exact name (binary search); NULL when absent. */
const StTensor *st_find(const StDir *d, const char *name);

/* Pointer to a tensor's bytes inside its mapped file. */
const void *st_data(const StDir *d, const StTensor *t);

/* "F32", "BF16", ...; and the reverse (-1 when unknown). */
const char *st_type_name(int dtype);
int st_type_from_name(const char *s);
size_t st_type_size(int dtype);

/* Convert n elements of F32/F16/BF16 to float32 (exact); returns -1 for any other dtype. */
int st_to_f32(float *dst, const void *src, int dtype, size_t n);

/* Write a single safetensors file (used by tests and tools): tensors given as name/dtype/shape/bytes. */
typedef struct {
	const char *name;
	int dtype, ndim;
	const int64_t *shape;
	const void *data;
} StWrite;
int st_write_file(const char *path, const StWrite *t, int n, char *err, size_t errlen);

#endif
