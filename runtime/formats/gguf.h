/*
** runtime/formats/gguf.h — GGUF weight files (v2 and v3), memory-mapped read-only, including split sets
** (name-00001-of-0000N.gguf). Every count, length, offset and size is checked against the file before
** anything points into it, so a truncated or hostile file yields a one-line error naming the file and
** the key or tensor, never a crash and never a print. Format facts: ../shared/reference/gguf.md.
**
** Dimensions are kept in ggml order: ne[0] is the innermost (contiguous, row-length) dimension. The
** PyTorch/numpy shape is the reverse (gguf_torch_shape).
**
** Also a small writer (gguf_writer_*) used by the tests and tests/tools/mkgguf.
*/
#ifndef GLM_GGUF_H
#define GLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types (gguf_type). */
enum {
	GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3, GGUF_UINT32 = 4, GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10,
	GGUF_INT64 = 11, GGUF_FLOAT64 = 12, GGUF_NTYPES = 13
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* A string value: bytes (NUL-terminated copy, may contain inner NULs) and its length. */
typedef struct {
	const char *s;
	uint64_t len;
} GgufStr;

typedef struct {
	char *key;           /* NUL-terminated copy */
	int type;            /* GGUF_* */
	int arr_type;        /* element type when type == GGUF_ARRAY */
	uint64_t n;          /* element count of an array; 1 for a scalar */
	union {              /* scalar value, widened */
		uint64_t u;
		int64_t i;
		double f;
	} v;
	GgufStr str;         /* a GGUF_STRING scalar */
	const uint8_t *arr;  /* fixed-size array elements, packed little-endian inside the mapping */
	GgufStr *strs;       /* elements of an array of strings (owned) */
	char *mem;           /* owned copies of the string bytes */
} GgufKV;

typedef struct {
	char *name;
	int type;            /* ggml type id (QT_* in ops/quant.h) */
	int ndim;            /* 1..4 (0 is read as a 1-element tensor with ndim 0) */
	int64_t ne[GGUF_MAX_DIMS]; /* ggml order; missing dims are 1 */
	int file;            /* index into Gguf.files */
	uint64_t off;        /* absolute byte offset in that file */
	uint64_t nbytes;
	int64_t nelem;
} GgufTensor;

typedef struct {
	char *path;
	const uint8_t *map;  /* whole file; NULL size 0 when the file is empty */
	size_t size;
	int owned;           /* 1 when mapped by us (munmap on close) */
	uint32_t alignment;  /* general.alignment of this file, or 32 */
	uint64_t data_start; /* aligned start of the data section */
} GgufFile;

typedef struct Gguf {
	char *path;          /* the path given (first split) */
	int version;         /* 2 or 3 (of the first file) */
	uint32_t alignment;
	int nfile;
	GgufFile *files;
	int nkv;
	GgufKV *kv;          /* the first file's metadata, in file order */
	int ntensor;
	GgufTensor *t;       /* all tensors of all splits, in file order */
	int *by_name;        /* indices of t sorted by name */
} Gguf;

/* Open a GGUF file, or a split set given its first file. On failure returns -1 with a one-line message
** naming the file (and key or tensor) in err, e.g.
** "w.gguf: tensor 'blk.0.attn_q.weight': data [4096, 8192) past end of file (data section 6000 bytes)". */
int gguf_open(Gguf *g, const char *path, char *err, size_t errlen);

/* Parse a GGUF image already in memory (not copied; it must outlive g). name is used in messages.
** Split sets cannot be opened this way. Used by tests and fuzzers. */
int gguf_open_buffer(Gguf *g, const void *buf, size_t size, const char *name, char *err, size_t errlen);

void gguf_close(Gguf *g);

/* ---- metadata ---- */

/* Key lookup; NULL when absent. */
const GgufKV *gguf_find_key(const Gguf *g, const char *key);

/* The value type name ("uint32", "string", "array"). */
const char *gguf_type_name(int type);

/* Typed getters. Each returns 0 and stores the value, or -1 when the key is absent or of an
** incompatible type. Integers convert between widths when the value fits (a uint32 key read as
** int64 works; a negative int read as uint does not); floats accept FLOAT32 and FLOAT64. */
int gguf_get_int(const Gguf *g, const char *key, int64_t *out);
int gguf_get_uint(const Gguf *g, const char *key, uint64_t *out);
int gguf_get_float(const Gguf *g, const char *key, double *out);
int gguf_get_bool(const Gguf *g, const char *key, int *out);
/* NULL when absent or not a string. */
const char *gguf_get_str(const Gguf *g, const char *key);

/* Array access on a KV (any element type). Length is kv->n. Element getters return -1 for an index out
** of range or an element type that does not convert (as above). */
uint64_t gguf_arr_len(const GgufKV *kv);
int gguf_arr_int(const GgufKV *kv, uint64_t i, int64_t *out);
int gguf_arr_uint(const GgufKV *kv, uint64_t i, uint64_t *out);
int gguf_arr_float(const GgufKV *kv, uint64_t i, double *out);
/* NULL when out of range or not an array of strings. */
const char *gguf_arr_str(const GgufKV *kv, uint64_t i, uint64_t *len);

/* Scalar value of a KV (the same conversions as the typed getters). */
int gguf_kv_int(const GgufKV *kv, int64_t *out);
int gguf_kv_uint(const GgufKV *kv, uint64_t *out);
int gguf_kv_float(const GgufKV *kv, double *out);

/* ---- tensors ---- */

/* Lookup by exact name (binary search); NULL when absent. */
const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name);

/* Pointer to a tensor's bytes inside its mapped file. */
const void *gguf_tensor_data(const Gguf *g, const GgufTensor *t);

/* PyTorch-order shape (ne reversed); returns the number of dims written (ndim, at least 1). */
int gguf_torch_shape(const GgufTensor *t, int64_t shape[GGUF_MAX_DIMS]);

/* ---- writer ---- */

/* Builds a GGUF v3 file in memory order: metadata in the order added, tensor infos and data in the
** order added, each tensor's data padded to the alignment. Nothing is checked beyond what is needed
** to write the bytes, so tests can also build odd files. */
typedef struct GgufWriter GgufWriter;

GgufWriter *gguf_writer_new(void);
void gguf_writer_free(GgufWriter *w);

/* Alignment of the data section and tensors (default 32). When not 32 a general.alignment (uint32) key
** is written first unless the caller added one. */
void gguf_writer_set_alignment(GgufWriter *w, uint32_t alignment);

/* Scalars. For GGUF_STRING pass the string through gguf_writer_str. */
int gguf_writer_u8(GgufWriter *w, const char *key, uint8_t v);
int gguf_writer_i8(GgufWriter *w, const char *key, int8_t v);
int gguf_writer_u16(GgufWriter *w, const char *key, uint16_t v);
int gguf_writer_i16(GgufWriter *w, const char *key, int16_t v);
int gguf_writer_u32(GgufWriter *w, const char *key, uint32_t v);
int gguf_writer_i32(GgufWriter *w, const char *key, int32_t v);
int gguf_writer_u64(GgufWriter *w, const char *key, uint64_t v);
int gguf_writer_i64(GgufWriter *w, const char *key, int64_t v);
int gguf_writer_f32(GgufWriter *w, const char *key, float v);
int gguf_writer_f64(GgufWriter *w, const char *key, double v);
int gguf_writer_bool(GgufWriter *w, const char *key, int v);
int gguf_writer_str(GgufWriter *w, const char *key, const char *v);

/* An array of n elements of a fixed-size type, given packed in host (little-endian) order; or of n
** NUL-terminated strings. */
int gguf_writer_arr(GgufWriter *w, const char *key, int elem_type, const void *data, uint64_t n);
int gguf_writer_arr_str(GgufWriter *w, const char *key, const char *const *v, uint64_t n);

/* A tensor: ggml type, ndim dims in ggml order (ne[0] innermost), nbytes of data (copied). */
int gguf_writer_tensor(GgufWriter *w, const char *name, int type, int ndim, const int64_t *ne,
                       const void *data, size_t nbytes);

/* Write the file; -1 with a message on failure. */
int gguf_writer_write(GgufWriter *w, const char *path, char *err, size_t errlen);

/* The file image in memory (malloc'd, caller frees); NULL on out-of-memory. */
uint8_t *gguf_writer_image(GgufWriter *w, size_t *size);

#endif
