/*
** bench/trace.c — an in-graph kernel timeline for glmrun (issue 8), loaded by the CUDA driver as an
** injection library: `CUDA_INJECTION64_PATH=build/bench/libglmtrace.so GLM_TRACE=out.tsv glmrun ...`.
** glmrun --profile times kernels with event nodes between them, which add a few µs each and hide the
** gaps between kernels; CUPTI's kernel activity records give each kernel's start and end inside the
** graph replay, so bench/trace.py can split a decode step into kernel time and the gaps between
** kernels. Not part of glmc or glmrun (they never load CUPTI); bench/decode.sh uses it with TRACE=1.
** Output: one line per kernel, "name start_ns end_ns graph_id node_id grid_x block_x", in no order.
*/
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_BYTES (8u << 20)

/* The output file, opened by InitializeInjection; the callbacks below are CUPTI's and take no
** user pointer, so this one handle is the library's only state. */
static FILE *trace_out;

/* Report a failed CUPTI call once, with what it was doing; the trace is then incomplete, not wrong. */
static int trace_ok(CUptiResult r, const char *what)
{
	if (r == CUPTI_SUCCESS)
		return 1;
	const char *s = NULL;
	cuptiGetResultString(r, &s);
	fprintf(stderr, "glmtrace: %s: %s\n", what, s ? s : "unknown CUPTI error");
	return 0;
}

/* CUPTI asks for a buffer to fill with records. */
static void CUPTIAPI trace_buf_request(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, BUF_BYTES);
	*size = *buf ? BUF_BYTES : 0;
	*max_records = 0;
}

/* CUPTI hands back a filled buffer: write its kernel records and free it. */
static void CUPTIAPI trace_buf_done(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
	(void)ctx, (void)stream, (void)size;
	CUpti_Activity *rec = NULL;
	while (trace_out && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		fprintf(trace_out, "%s %llu %llu %u %llu %d %d\n", k->name ? k->name : "?",
		        (unsigned long long)k->start, (unsigned long long)k->end, k->graphId,
		        (unsigned long long)k->graphNodeId, k->gridX, k->blockX);
	}
	size_t dropped = 0;
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		fprintf(stderr, "glmtrace: %zu records dropped\n", dropped);
	free(buf);
}

/* At exit: flush what CUPTI still holds, then close the file. */
static void trace_finish(void)
{
	trace_ok(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
	if (trace_out && fclose(trace_out))
		perror("glmtrace: closing the trace");
	trace_out = NULL;
}

/* The driver calls this once when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void)
{
	const char *path = getenv("GLM_TRACE");
	if (!path || !*path) {
		fprintf(stderr, "glmtrace: set GLM_TRACE to the output file\n");
		return 0;
	}
	if (!(trace_out = fopen(path, "w"))) {
		perror(path);
		return 0;
	}
	if (!trace_ok(cuptiActivityRegisterCallbacks(trace_buf_request, trace_buf_done), "cuptiActivityRegisterCallbacks") ||
	    !trace_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records"))
		return 0;
	atexit(trace_finish);
	return 1;
}
