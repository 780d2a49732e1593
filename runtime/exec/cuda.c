/*
** runtime/exec/cuda.c — glmrun on one GPU: driver API through dlopen, one module per plan, one device
** allocation each for weights, activations and caches, eager prefill, and a decode step that is one
** CUDA-graph launch. The graph reads and writes only device buffers: the sampler writes the next token
** and position where the next replay reads them, so a whole step needs no host-to-device copy.
*/
#include "gemv_shape.h"
#include "gpu.h"
#include "libcuda.h"
#include "libnccl.h"
#include "libnvrtc.h"
#include "ref.h"
#include "weights.h"
#include "quant.h"

#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* cuBLASLt for prefill matmuls, when the library is present; else glmc's own GEMM kernel runs. */
typedef struct {
	void *so;
	cublasLtHandle_t h;
	__typeof__(cublasLtCreate) *create;
	__typeof__(cublasLtDestroy) *destroy;
	__typeof__(cublasLtMatmulDescCreate) *desc_create;
	__typeof__(cublasLtMatmulDescSetAttribute) *desc_set;
	__typeof__(cublasLtMatmulDescDestroy) *desc_destroy;
	__typeof__(cublasLtMatrixLayoutCreate) *layout_create;
	__typeof__(cublasLtMatrixLayoutDestroy) *layout_destroy;
	__typeof__(cublasLtMatmulPreferenceCreate) *pref_create;
	__typeof__(cublasLtMatmulPreferenceSetAttribute) *pref_set;
	__typeof__(cublasLtMatmulPreferenceDestroy) *pref_destroy;
	__typeof__(cublasLtMatmulAlgoGetHeuristic) *heuristic;
	__typeof__(cublasLtMatmul) *matmul;
	CUdeviceptr ws;
	size_t ws_size;
} Lt;

struct Gpu {
	Cu cu;
	Lt lt;
	const Graph *g;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CUmodule mod;
	CUfunction *fn;              /* per launch */
	unsigned char *gemm;         /* per launch: 1 when it is a linear's prefill GEMM, which cuBLASLt may run */
	CUfunction sample;
	CUdeviceptr *ptr;            /* per node */
	CUdeviceptr *rope;           /* per node: rope tables */
	CUdeviceptr wmem, amem, cmem, smem;
	int tokens, pos, logits;     /* node ids */
	int64_t maxT, S, V;
	int64_t fit_min;             /* GpuOpts.fit_min, cleared once the caches were shrunk to fit */
	CUdeviceptr params, step, ring, rope_mem;
	CUdeviceptr part_v, part_i, done; /* the greedy sampler's split: SAMPLE_NB partials and a counter a slot */
	CUdeviceptr nf;              /* the sampler's NaN/Inf count and verdict, two ints a slot (k_sample) */
	CUdeviceptr seq;             /* int[maxT]: the cache slot of each token of the step */
	CUdeviceptr scr;             /* shared scratch for kernels that need workspace */
	CUdeviceptr zero;            /* the KA_ZERO regions: cleared once, left zero by every kernel */
	int ring_cap;
	int nslots;                  /* sequences the caches hold */
	int samp_rows;               /* the sampler reads 4 parameters a row (glm_sample_rows); 0: one set for all */
	float samp0[4];              /* the GpuOpts' parameters (seed bits last) */
	CUgraph *graph;              /* per batch bucket (index = rows), captured on first use */
	CUgraphExec *exec;
	int *captured_logits;
	int capturing;
	int want_pdl;                /* GpuOpts.pdl */
	int *wq;                     /* per node: block type of a weight kept quantized (Cuda.wq), or -1 */
	CUdeviceptr qscr;            /* prefill: a quantized weight dequantized for cuBLASLt (lt_qweight) */
	size_t qscr_size;
	int32_t *host_tok;           /* pinned; then (host_nf) the sampler's verdicts, two ints a row */
	int32_t *host_nf;
	float *host_logits;          /* pinned, V floats (converted from bf16 when needed) */
	void *host_raw;              /* pinned, one logits row as the device stores it */
	CUevent *prof_ev;            /* --profile: two events per launch (before, after) and two for the sampler */
	GpuStats stats;
	/* Tensor parallelism: rank of tp on CUDA device `device`; collectives go through comm. */
	int device, rank, tp;
	const Nccl *nc;
	ncclComm_t comm;
	/* The one-shot P2P allreduce: used for allreduces of at most p2p_max bytes once started. */
	CUfunction p2p;
	CUdeviceptr p2p_mbox, p2p_ctl;
	size_t p2p_cap, p2p_max;
	int p2p_next;                /* the allreduce just skipped: the next launch's KA_P2P does it */
	/* The persistent decode kernel (persist_open), when the 1-token step runs as its one launch: */
	CUmodule pmod;
	CUfunction pfn;              /* glm_persist, or NULL: the step runs the launch list */
	CUdeviceptr pmem;            /* one allocation: the tables below and the argument records */
	CUdeviceptr ptask, pcut, pwait, plt, pcount, pctl, pargs;
	unsigned pworkers, pblock, pdsm;
	int pnseg;                   /* segments a step: 1 + the collectives between them (tp > 1) */
	int plaunches;               /* the kernel's launches a step: the segments with tasks, and the last */
	int *pcoll, *psegtasks;      /* per segment: the collective launched after it (Cuda.l index), its tasks */
	int pcolls;                  /* the step's collectives (P2P tasks when pnseg is 1) */
	uint32_t *plane;             /* per launch: lanes, own and pool bytes (persist.cuh GlmPLaunch) */
	uint32_t ppre;               /* GlmPCtl.pre_max */
	uint64_t *ptrace;            /* --profile: persist_trace's steps x ntask_all x 4 (persist.cuh's trace) */
	int ptrace_steps;
};

/* The host image of ops/kernels.cuh's P2pCtl (same layout). */
#define P2P_MAXRANK 8
#define P2P_NBMAX 64
#define P2P_FLAGS_BYTES (2 * P2P_MAXRANK * P2P_NBMAX * 4)
typedef struct {
	uint64_t mbox[P2P_MAXRANK];
	uint64_t seq, arrive;
	int32_t rank, tp;
	int64_t cap;
} P2pCtl;

static void lt_open(Gpu *x);
static size_t scratch_bytes(const Gpu *x, const Launch *l, int64_t T, int upto);
static size_t region_bytes(const Gpu *x, const Launch *l, int kind, int64_t T, int upto);
static size_t q_bytes(const Gpu *x, int node);
static int q_upload_random(Gpu *x, int wi, int rank, int tp, char *err, size_t len);
static int q_upload_blocks(Gpu *x, const Weights *d, int wi, int rank, int tp, unsigned char *stage, size_t cap, char *err,
                           size_t len);
static int lt_qweight(Gpu *x, int wnode, int64_t T, CUdeviceptr *wp, char *err, size_t len);
static int persist_open(Gpu *x, const GpuOpts *o, char *err, size_t len);
static int persist_p2p_ok(const Gpu *x);
static int persist_tables(Gpu *x, int one, char *err, size_t len);
static int persist_launch(Gpu *x, CUdeviceptr trace, char *err, size_t len);
static int persist_trace(Gpu *x, int steps, char *err, size_t len);

static int cuerr(const Gpu *x, CUresult r, const char *what, char *err, size_t len)
{
	const char *s = NULL;
	if (x->cu.errstr)
		x->cu.errstr(r, &s);
	return seterr(err, len, "CUDA: %s failed: %s (error %d)", what, s ? s : "unknown error", (int)r);
}

#define CK(call, what)                                \
	do {                                              \
		CUresult r_ = (call);                         \
		if (r_ != CUDA_SUCCESS)                       \
			return cuerr(x, r_, what, err, len);      \
	} while (0)

/* Evaluate a Size with T and S bound. */
static int64_t size_val(const Gpu *x, Size s, int64_t T)
{
	if (s.node < 0)
		return s.div;
	const Node *n = &x->g->node[s.node];
	int64_t p = 1;
	for (int i = s.lo; i < s.hi; i++)
		p *= n->dim[i] == DIM_T ? T : n->dim[i] == DIM_S ? x->S : n->dim[i];
	return (p + s.div - 1) / s.div;
}

/* Device element size of a node's buffer. */
static size_t elsize(const Gpu *x, int id)
{
	const Node *n = &x->g->node[id];
	const Cuda *c = &x->g->cuda;
	if (n->dtype == DT_I32)
		return 4;
	if (n->kind == VK_WEIGHT)
		return dtype_size(cuda_wdtype(x->g, id));
	return dtype_size(c->act);
}

static void progress(const Gpu *x, const GpuOpts *o, size_t done, size_t total)
{
	(void)x;
	if (!o->progress || !total)
		return;
	fprintf(stderr, "\rglmrun: uploading weights %3d%% (%.2f / %.2f GiB)", (int)(100.0 * (double)done / (double)total),
	        (double)done / (1 << 30), (double)total / (1 << 30));
	if (done == total)
		fprintf(stderr, "\n");
}

/* Each rope node's table of inverse frequencies, as the CPU reference computes them: with frequency
** divisors (a third input, e.g. a GGUF's rope_freqs.weight) read from the checkpoint d, or generated as
** the CPU executor generates them for a --random-weights plan. */
static int upload_rope_tables(Gpu *x, const Weights *d, char *err, size_t len)
{
	const Graph *g = x->g;
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (n->op != OP_ROPE)
			continue;
		size_t half = (size_t)A_rope_rot_dim(n) / 2;
		float *inv = malloc(sizeof(float) * 2 * (half ? half : 1)), *div = NULL, cs;
		if (!inv)
			return seterr(err, len, "out of memory");
		for (int k = 0; n->nin > 2 && k < g->nw && !div; k++)
			if (g->w[k].node == n->in[2]) {
				div = inv + half;
				if (weights_load_f32(d, g, &g->w[k], x->rank, x->tp, div, err, len))
					return free(inv), -1;
			}
		if (n->nin > 2 && !div) {
			free(inv);
			return seterr(err, len, "plan: the frequency divisors of rope %%%d are not a weight", i);
		}
		op_rope_table(n, div, inv, &cs);
		CUresult r = x->cu.htod(x->rope[i], inv, sizeof(float) * half);
		free(inv);
		if (r != CUDA_SUCCESS)
			return cuerr(x, r, "cuMemcpyHtoD (rope table)", err, len);
	}
	return 0;
}

/*
** Upload every weight through a pinned staging buffer. Stored bytes go up as they are when the device
** type is the stored type and no transform applies; otherwise the weight is loaded as float32
** (dequantized, rows transformed) and narrowed to the device type.
*/
static int upload_weights(Gpu *x, const char *weights, const GpuOpts *o, char *err, size_t len)
{
	const Graph *g = x->g;
	Weights d = {.random_qtype = -1};
	const char *wf = graph_meta(g, "weights.format");
	int random = wf && !strcmp(wf, "random");
	if (random)
		d.random_qtype = 0; /* generated here, flagged in glmrun's output */
	else if (weights_open(&d, weights, err, len))
		return -1;
	size_t total = 0, done = 0, stage_cap = 64u << 20;
	for (int i = 0; i < g->nw; i++)
		total += x->wq[g->w[i].node] >= 0 ? q_bytes(x, g->w[i].node)
		                                  : (size_t)node_numel(&g->node[g->w[i].node], 0, 0) * elsize(x, g->w[i].node);
	unsigned char *stage = NULL;
	CUresult r = x->cu.alloc_host((void **)&stage, stage_cap);
	if (r != CUDA_SUCCESS) {
		weights_close(&d);
		return cuerr(x, r, "cuMemAllocHost (weight staging)", err, len);
	}
	int rc = 0;
	for (int i = 0; i < g->nw && !rc; i++) {
		const WeightRef *w = &g->w[i];
		const Node *n = &g->node[w->node];
		if (random || x->wq[w->node] >= 0) {
			/* generated on the GPU, or GGUF blocks kept as they are (quantized weights, below) */
			size_t b = x->wq[w->node] >= 0 ? q_bytes(x, w->node) : (size_t)node_numel(n, 0, 0) * elsize(x, w->node);
			rc = random ? q_upload_random(x, i, x->rank, x->tp, err, len)
			            : q_upload_blocks(x, &d, i, x->rank, x->tp, stage, stage_cap, err, len);
			done += b;
			progress(x, o, done, total);
			continue;
		}
		size_t numel = (size_t)node_numel(n, 0, 0), es = elsize(x, w->node);
		int devtype = es == 4 ? DT_F32 : x->g->cuda.wconv >= 0 ? x->g->cuda.wconv : w->dtype;
		const void *raw = NULL;
		WTensor t;
		if (!random && devtype == w->dtype && !w->unpermute && !w->row0 && !w->rstride && !w->parts &&
		    (w->split < 0 || x->tp == 1)) {
			if (weights_find(&d, w->source, &t) < 0 || t.qtype != w->qtype || t.nbytes != w->nbytes) {
				rc = seterr(err, len, "%s: tensor '%s' differs from the plan's manifest; recompile the plan",
				            weights, w->source);
				break;
			}
			raw = t.data;
		}
		float *f = NULL;
		if (!raw) {
			if (!(f = malloc(numel * sizeof(float)))) {
				rc = seterr(err, len, "out of memory loading '%s'", w->source);
				break;
			}
			if ((rc = weights_load_f32(&d, g, w, x->rank, x->tp, f, err, len)))
				break;
		}
		for (size_t at = 0; at < numel && !rc;) {
			size_t cnt = stage_cap / es;
			if (cnt > numel - at)
				cnt = numel - at;
			if (raw)
				memcpy(stage, (const unsigned char *)raw + at * es, cnt * es);
			else if (es == 4)
				memcpy(stage, f + at, cnt * 4);
			else
				for (size_t k = 0; k < cnt; k++)
					((uint16_t *)stage)[k] = devtype == DT_BF16 ? ref_f32_to_bf16(f[at + k]) : ref_f32_to_f16(f[at + k]);
			r = x->cu.htod(x->ptr[w->node] + at * es, stage, cnt * es);
			if (r != CUDA_SUCCESS)
				rc = cuerr(x, r, "cuMemcpyHtoD (weights)", err, len);
			at += cnt;
			done += cnt * es;
			progress(x, o, done, total);
		}
		free(f);
		if (o->beat)
			o->beat(o->beat_ctx, "uploading weights");
	}
	x->cu.free_host(stage);
	if (!rc)
		rc = upload_rope_tables(x, &d, err, len);
	if (!random)
		weights_close(&d);
	return rc;
}

/* Launch i asks for dynamic shared memory (k_qgemv_sk): past 48 KB a kernel must be allowed it, and the
** GPU must have it beside the kernel's static shared memory. */
static int smem_allow(Gpu *x, int i, char *err, size_t len)
{
	const Launch *l = &x->g->cuda.l[i];
	int optin = 0, stat = 0, cur = 0;
	CK(x->cu.dev_attr(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, x->dev), "cuDeviceGetAttribute");
	CK(x->cu.fn_attr(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, x->fn[i]), "cuFuncGetAttribute");
	if (l->smem + stat > optin)
		return seterr(err, len, "plan: kernel %s of node %%%d needs %d bytes of shared memory a block, this GPU has %d",
		              l->kernel, l->node, l->smem + stat, optin);
	CK(x->cu.fn_attr(&cur, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, x->fn[i]), "cuFuncGetAttribute");
	if (l->smem > cur)
		CK(x->cu.fn_set(x->fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l->smem),
		   "cuFuncSetAttribute (dynamic shared memory)");
	return 0;
}

/* The module: the plan's cubin when it was built for this GPU, else NVRTC from the plan's source. */
static int load_module(Gpu *x, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	int major = 0, minor = 0;
	CK(x->cu.dev_attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, x->dev), "cuDeviceGetAttribute");
	CK(x->cu.dev_attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, x->dev), "cuDeviceGetAttribute");
	x->stats.cc_major = major, x->stats.cc_minor = minor;
	/* kernels.cuh's griddepcontrol needs sm_90; the plan's wrappers wait (glm_pdl_wait) either way */
	x->stats.pdl = major >= 9 && x->cu.launch_ex && x->want_pdl;
	char arch[16];
	snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
	unsigned char *own = NULL;
	const void *image = c->cubin;
	if (!c->cubin || strcmp(c->arch, arch)) {
		size_t n;
		if (nvrtc_compile(c->source, arch, &own, &n, err, len))
			return -1;
		image = own;
		x->stats.recompiled |= 1;
	}
	CUresult r = x->cu.mod_load(&x->mod, image);
	free(own);
	if (r != CUDA_SUCCESS)
		return cuerr(x, r, "cuModuleLoadData", err, len);
	x->fn = calloc((size_t)c->nl + 1, sizeof *x->fn);
	x->gemm = calloc((size_t)c->nl + 1, 1);
	if (!x->fn || !x->gemm)
		return seterr(err, len, "out of memory");
	for (int i = 0; i < c->nl; i++) {
		if (c->l[i].kind != LK_KERNEL)
			continue; /* a collective: NCCL, not a kernel of the module */
		x->gemm[i] = (unsigned char)cuda_prefill_gemm(x->g, i);
		r = x->cu.mod_fn(&x->fn[i], x->mod, c->l[i].kernel);
		if (r != CUDA_SUCCESS)
			return seterr(err, len, "plan: kernel %s of node %%%d is missing from the module", c->l[i].kernel,
			              c->l[i].node);
		int maxt = 0;
		x->cu.fn_attr(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, x->fn[i]);
		if (c->l[i].block > maxt)
			return seterr(err, len, "plan: kernel %s launches %d threads but allows %d", c->l[i].kernel,
			              c->l[i].block, maxt);
		if (c->l[i].smem > 0 && smem_allow(x, i, err, len))
			return -1;
	}
	CK(x->cu.mod_fn(&x->sample, x->mod, c->sample_kernel), "cuModuleGetFunction (sampler)");
	x->samp_rows = !strcmp(c->sample_kernel, "glm_sample_rows");
	return 0;
}

/* Bytes for a message: GiB from 1 GiB up, else MiB (buf of 16). */
static const char *mem_size(char *buf, size_t b)
{
	if (b >= (size_t)1 << 30)
		snprintf(buf, 16, "%.2f GiB", (double)b / (1 << 30));
	else
		snprintf(buf, 16, "%.2f MiB", (double)b / (1 << 20));
	return buf;
}

/* Lay out every buffer, check the total against free memory, then allocate. */
static int alloc_buffers(Gpu *x, char *err, size_t len)
{
	const Graph *g = x->g;
	size_t wb = 0, ab = 0, cb = 0, rb = 0;
	size_t *off = calloc((size_t)g->n, sizeof *off);
	x->ptr = calloc((size_t)g->n, sizeof *x->ptr);
	x->rope = calloc((size_t)g->n, sizeof *x->rope);
	if (!off || !x->ptr || !x->rope)
		return free(off), seterr(err, len, "out of memory");
	/* Activations: the memory plan's arena when there is one (offsets computed for float32 values, which
	** also hold bf16 ones). */
	int planned = g->mem.planned;
	if (planned)
		ab = (size_t)(g->mem.token_bytes * x->maxT + g->mem.static_bytes + 256);
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		size_t bytes = ((n->kind == VK_WEIGHT && x->wq[i] >= 0 ? q_bytes(x, i)
		                                                      : (size_t)node_numel(n, x->maxT, x->S) * elsize(x, i)) +
		                255) & ~(size_t)255;
		if (n->op == OP_ROPE)
			rb += ((size_t)A_rope_rot_dim(n) / 2 * sizeof(float) + 255) & ~(size_t)255;
		if (n->op == OP_RESHAPE || (planned && n->kind == VK_ACT))
			continue;
		size_t *acc = n->kind == VK_WEIGHT ? &wb : n->kind == VK_CACHE ? &cb : &ab;
		off[i] = *acc;
		*acc += n->kind == VK_CACHE ? bytes * (size_t)x->nslots : bytes;
	}
	/* The step buffer: sampling parameters (4 floats per sequence slot, in 256-byte units), then per row of a step its step counter and sequence slot,
	** then each row's ring of sampled tokens, then per sequence slot (a sampler row) the greedy split's
	** counter and SAMPLE_NB partial maxima (values, then indices), cleared once below. */
	x->ring_cap = 4096;
	size_t rows = ((size_t)x->maxT + 63) & ~(size_t)63, srows = ((size_t)x->nslots + 63) & ~(size_t)63;
	size_t pb = ((size_t)x->nslots * 16 + 255) & ~(size_t)255;
	size_t sb = pb + rows * 8 + rows * (size_t)x->ring_cap * 4 + srows * 4 * (1 + 2 * SAMPLE_NB) + srows * 8, scr = 0,
	       zb = 0;
	for (int i = 0; i < g->cuda.nl; i++) { /* a launch never runs past its tmax: size it there at most */
		const Launch *l = &g->cuda.l[i];
		int64_t T = x->maxT < l->tmax ? x->maxT : l->tmax;
		size_t b = scratch_bytes(x, l, T, MAXKARG), z = region_bytes(x, l, KA_ZERO, T, MAXKARG);
		scr = b > scr ? b : scr, zb = z > zb ? z : zb;
	}
	ab += scr;
	/* The kernels' zero regions (KA_ZERO) follow the step buffer, which is cleared once below. */
	size_t zoff = (sb + 255) & ~(size_t)255;
	sb = zoff + zb;
	size_t need = wb + ab + cb + rb + sb, free_b = 0, total_b = 0;
	CUresult r = x->cu.mem_info(&free_b, &total_b);
	if (r != CUDA_SUCCESS)
		return free(off), cuerr(x, r, "cuMemGetInfo", err, len);
	if (need + (256u << 20) > free_b) {
		/* what fits: the cache grows with the positions, the rest does not (each cache node 256-byte aligned) */
		size_t ncache = 0;
		for (int i = 0; i < g->n; i++)
			ncache += g->node[i].kind == VK_CACHE;
		size_t fixed = need - cb + (256u << 20) + 256 * ncache * (size_t)x->nslots;
		size_t per_pos = x->S > 0 ? (cb + (size_t)x->S - 1) / (size_t)x->S : 0;
		long long fit = per_pos && free_b > fixed ? (long long)((free_b - fixed) / per_pos) : 0;
		char what[96];
		if (fit > 0)
			snprintf(what, sizeof what, "at most %lld position%s fit%s (-c %lld)%s", fit, fit > 1 ? "s" : "",
			         fit > 1 ? "" : "s", fit, x->nslots > 1 ? " at this --batch" : "");
		else
			snprintf(what, sizeof what, "the weights and activations alone leave no room for a KV cache");
		free(off);
		if (x->fit_min > 0 && fit >= x->fit_min && fit < x->S) { /* size everything again at what fits */
			free(x->ptr), free(x->rope);
			x->ptr = NULL, x->rope = NULL, x->S = fit, x->fit_min = 0;
			return alloc_buffers(x, err, len);
		}
		char sz[5][16];
		return seterr(err, len, "not enough GPU memory: the plan needs %s (weights %s, activations %s, KV cache %s for "
		              "%d sequence%s of %lld positions) but %s are free; %s", mem_size(sz[0], need), mem_size(sz[1], wb),
		              mem_size(sz[2], ab), mem_size(sz[3], cb), x->nslots, x->nslots > 1 ? "s" : "", (long long)x->S,
		              mem_size(sz[4], free_b), what);
	}
	if ((wb && (r = x->cu.alloc(&x->wmem, wb))) || (ab && (r = x->cu.alloc(&x->amem, ab))) ||
	    (cb && (r = x->cu.alloc(&x->cmem, cb))) || (r = x->cu.alloc(&x->smem, sb)) ||
	    (rb && (r = x->cu.alloc(&x->rope_mem, rb)))) {
		free(off);
		return cuerr(x, r, "cuMemAlloc", err, len);
	}
	x->stats.weight_bytes = wb, x->stats.act_bytes = ab, x->stats.cache_bytes = cb;
	size_t ro = 0;
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (planned && n->kind == VK_ACT) {
			int64_t o = n->mem_region == MEM_TOKEN ? n->mem_off * x->maxT : g->mem.token_bytes * x->maxT + n->mem_off;
			x->ptr[i] = x->amem + (CUdeviceptr)o;
		} else if (n->op == OP_RESHAPE) {
			x->ptr[i] = x->ptr[n->in[0]];
			continue;
		} else {
			CUdeviceptr base = n->kind == VK_WEIGHT ? x->wmem : n->kind == VK_CACHE ? x->cmem : x->amem;
			x->ptr[i] = base + off[i];
		}
		if (n->op == OP_ROPE) { /* filled by upload_rope_tables */
			x->rope[i] = x->rope_mem + ro;
			ro += ((size_t)A_rope_rot_dim(n) / 2 * sizeof(float) + 255) & ~(size_t)255;
		}
	}
	free(off);
	/* Poison activations (NaN in f32 and bf16) so a kernel that skips an element is visible; caches start
	** at zero, since attention never reads rows past the position. */
	if (ab)
		CK(x->cu.memset8(x->amem, 0xff, ab), "cuMemsetD8");
	if (cb)
		CK(x->cu.memset8(x->cmem, 0, cb), "cuMemsetD8");
	CK(x->cu.memset8(x->smem, 0, sb), "cuMemsetD8");
	x->params = x->smem, x->step = x->smem + pb, x->seq = x->step + rows * 4, x->ring = x->seq + rows * 4;
	x->done = x->ring + rows * (size_t)x->ring_cap * 4, x->part_v = x->done + srows * 4;
	x->part_i = x->part_v + srows * SAMPLE_NB * 4;
	x->nf = x->part_i + srows * SAMPLE_NB * 4;
	x->zero = x->smem + zoff;
	x->scr = x->amem + ab - scr;
	return 0;
}

int gpu_open(Gpu **out, const Graph *g, const char *weights, int64_t maxT, int64_t S, const GpuOpts *o, char *err,
             size_t len)
{
	*out = NULL;
	if (!g->cuda.source)
		return seterr(err, len, "the plan has no GPU kernels (glmc wrote it for the CPU only and said why when it "
		              "compiled it); run it with --device cpu");
	Gpu *x = calloc(1, sizeof *x);
	if (!x)
		return seterr(err, len, "out of memory");
	x->g = g, x->maxT = maxT, x->S = S, x->fit_min = o->fit_min, x->tokens = x->pos = x->logits = -1;
	x->nslots = o->batch > 1 ? o->batch : 1;
	x->device = o->device, x->rank = o->rank, x->tp = o->tp > 0 ? o->tp : 1, x->want_pdl = o->pdl;
	*out = x;
	if (x->nslots > maxT)
		return seterr(err, len, "%d sequences need step buffers for %d tokens, sized for %lld", x->nslots, x->nslots,
		              (long long)maxT);
	x->graph = calloc((size_t)x->nslots + 1, sizeof *x->graph);
	x->exec = calloc((size_t)x->nslots + 1, sizeof *x->exec);
	x->captured_logits = calloc((size_t)x->nslots + 1, sizeof *x->captured_logits);
	if (!x->graph || !x->exec || !x->captured_logits)
		return seterr(err, len, "out of memory");
	if (cu_load(&x->cu, err, len))
		return -1;
	CUresult r = x->cu.init(0);
	if (r == CUDA_ERROR_NO_DEVICE)
		return seterr(err, len, "--device cuda: no GPU found; run with --device cpu");
	if (r != CUDA_SUCCESS)
		return cuerr(x, r, "cuInit", err, len);
	int ndev = 0;
	CK(x->cu.dev_count(&ndev), "cuDeviceGetCount");
	if (ndev < 1)
		return seterr(err, len, "--device cuda: no GPU found; run with --device cpu");
	if (x->device < 0 || x->device >= ndev)
		return seterr(err, len, "--device cuda: GPU %d asked for, %d visible", x->device, ndev);
	CK(x->cu.dev_get(&x->dev, x->device), "cuDeviceGet");
	x->cu.dev_name(x->stats.name, sizeof x->stats.name, x->dev);
	CK(x->cu.ctx_retain(&x->ctx, x->dev), "cuDevicePrimaryCtxRetain");
	CK(x->cu.ctx_set(x->ctx), "cuCtxSetCurrent");
	CK(x->cu.stream_create(&x->st, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	for (int i = 0; i < g->n; i++)
		if (g->node[i].op == OP_INPUT)
			*(strcmp(g->node[i].name, "tokens") ? &x->pos : &x->tokens) = i;
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			x->logits = g->out[i];
	if (x->tokens < 0 || x->pos < 0 || x->logits < 0)
		return seterr(err, len, "plan: needs inputs 'tokens' and 'pos' and an output 'logits'");
	x->V = g->node[x->logits].dim[1];
	if (!(x->wq = malloc(sizeof(int) * (size_t)(g->n ? g->n : 1))))
		return seterr(err, len, "out of memory");
	for (int i = 0; i < g->n; i++)
		x->wq[i] = -1;
	for (int i = 0; g->cuda.wq && i < g->nw; i++)
		x->wq[g->w[i].node] = g->cuda.wq[i];
	if (load_module(x, err, len) || alloc_buffers(x, err, len))
		return -1;
	if (!o->no_lt)
		lt_open(x);
	x->stats.have_lt = x->lt.h != NULL;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (upload_weights(x, weights, o, err, len))
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	x->stats.upload_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	if (persist_open(x, o, err, len))
		return -1;
	/* every slot's row starts with the GpuOpts' sampling (an older plan's sampler reads row 0 only) */
	x->samp0[0] = o->temp, x->samp0[1] = (float)o->top_k, x->samp0[2] = o->top_p;
	memcpy(&x->samp0[3], &o->seed, 4);
	float *params = malloc(16 * (size_t)x->nslots);
	if (!params)
		return seterr(err, len, "out of memory");
	for (int r = 0; r < x->nslots; r++)
		memcpy(params + 4 * r, x->samp0, 16);
	CUresult pr = x->cu.htod(x->params, params, 16 * (size_t)x->nslots);
	free(params);
	if (pr != CUDA_SUCCESS)
		return cuerr(x, pr, "cuMemcpyHtoD (sampling parameters)", err, len);
	CK(x->cu.alloc_host((void **)&x->host_tok, 12 * (size_t)x->nslots + 128), "cuMemAllocHost");
	x->host_nf = x->host_tok + x->nslots + 16;
	CK(x->cu.alloc_host((void **)&x->host_logits, (size_t)x->V * 4), "cuMemAllocHost");
	CK(x->cu.alloc_host(&x->host_raw, (size_t)x->V * 4 * (size_t)x->nslots), "cuMemAllocHost");
	for (int i = 0; i < g->cuda.nl; i++)
		if (g->cuda.l[i].tmin <= 1 && 1 <= g->cuda.l[i].tmax) {
			if (g->cuda.l[i].kind != LK_KERNEL)
				x->stats.collectives_per_step++;
			else
				x->stats.kernels_per_step++;
		}
	x->stats.kernels_per_step++; /* the sampler */
	if (x->pfn)
		x->stats.kernels_per_step = x->plaunches + 1; /* and the sampler */
	return 0;
}

/* Open cuBLASLt and its workspace; on any failure prefill simply keeps glmc's GEMM kernel. */
static void lt_open(Gpu *x)
{
	Lt *lt = &x->lt;
	static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13",
	                              NULL};
	for (const char **n = names; *n && !lt->so; n++)
		lt->so = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
	if (!lt->so)
		return;
	int ok = 1;
#define SYM(f, name) ok = ok && (*(void **)&lt->f = dlsym(lt->so, name)) != NULL;
	SYM(create, "cublasLtCreate");
	SYM(destroy, "cublasLtDestroy");
	SYM(desc_create, "cublasLtMatmulDescCreate");
	SYM(desc_set, "cublasLtMatmulDescSetAttribute");
	SYM(desc_destroy, "cublasLtMatmulDescDestroy");
	SYM(layout_create, "cublasLtMatrixLayoutCreate");
	SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
	SYM(pref_create, "cublasLtMatmulPreferenceCreate");
	SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
	SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
	SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
	SYM(matmul, "cublasLtMatmul");
#undef SYM
	lt->ws_size = 32u << 20;
	if (!ok || lt->create(&lt->h) != CUBLAS_STATUS_SUCCESS || x->cu.alloc(&lt->ws, lt->ws_size) != CUDA_SUCCESS) {
		if (lt->h)
			lt->destroy(lt->h);
		dlclose(lt->so);
		memset(lt, 0, sizeof *lt);
	}
}

/*
** A prefill linear through cuBLASLt: row-major Y[M,N] = X[M,K]·W[N,K]ᵀ is column-major Yᵀ = op(W)·Xᵀ with
** W seen as a K×N column-major matrix, transposed. Only for matching types (f32/f32 or bf16/bf16, bias of
** the same type); returns 1 when it ran, 0 to let the kernel run instead, -1 on error.
*/
static int lt_linear(Gpu *x, int id, int64_t T, char *err, size_t len)
{
	Lt *lt = &x->lt;
	const Graph *g = x->g;
	const Node *n = &g->node[id];
	if (!lt->h || n->op != OP_LINEAR)
		return 0;
	int xi = n->in[0], wi = n->in[1], bi = n->nin > 2 ? n->in[2] : -1;
	size_t es = elsize(x, xi), wes = x->wq[wi] >= 0 ? es : elsize(x, wi); /* blocks: dequantized to es below */
	CUdeviceptr wp = x->ptr[wi];
	if (wes != es || (bi >= 0 && elsize(x, bi) != es) || g->node[wi].dtype == DT_F16)
		return 0;
	if (x->wq[wi] >= 0) {
		int q = lt_qweight(x, wi, T, &wp, err, len);
		if (q <= 0)
			return q;
	}
	cudaDataType_t dt = es == 4 ? CUDA_R_32F : CUDA_R_16BF;
	int64_t K = g->node[wi].dim[1], N = g->node[wi].dim[0], M = node_numel(&g->node[xi], T, x->S) / K;
	cublasLtMatmulDesc_t desc = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	cublasLtMatmulHeuristicResult_t heur;
	int found = 0, rc = 0;
	float one = 1, zero = 0;
	CUdeviceptr bias = bi >= 0 ? x->ptr[bi] : 0;
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
	cublasStatus_t st = lt->desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (!st)
		st = lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
	if (!st)
		st = lt->desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
	if (!st && bi >= 0)
		st = lt->desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
	if (!st && bi >= 0)
		st = lt->desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
	if (!st)
		st = lt->layout_create(&la, dt, (uint64_t)K, (uint64_t)N, K);
	if (!st)
		st = lt->layout_create(&lb, dt, (uint64_t)K, (uint64_t)M, K);
	if (!st)
		st = lt->layout_create(&lc, dt, (uint64_t)N, (uint64_t)M, N);
	if (!st)
		st = lt->pref_create(&pref);
	if (!st)
		st = lt->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->ws_size, sizeof lt->ws_size);
	if (!st)
		st = lt->heuristic(lt->h, desc, la, lb, lc, lc, pref, 1, &heur, &found);
	if (!st && found > 0) {
		st = lt->matmul(lt->h, desc, &one, (void *)wp, la, (void *)x->ptr[xi], lb, &zero, (void *)x->ptr[id], lc,
		                (void *)x->ptr[id], lc, &heur.algo, (void *)lt->ws, lt->ws_size, (cudaStream_t)x->st);
		rc = st ? seterr(err, len, "cuBLASLt: matmul for linear %%%d (%lld×%lld·%lld) failed (status %d)", id,
		                 (long long)M, (long long)K, (long long)N, (int)st)
		        : 1;
	}
	if (pref)
		lt->pref_destroy(pref);
	if (lc)
		lt->layout_destroy(lc);
	if (lb)
		lt->layout_destroy(lb);
	if (la)
		lt->layout_destroy(la);
	if (desc)
		lt->desc_destroy(desc);
	if (rc == 1)
		x->stats.lt_matmuls++;
	return rc;
}

/* Bytes of a launch's regions of one kind (KA_SCRATCH or KA_ZERO) among its first `upto` arguments at T
** tokens (each region 256-byte aligned): the offset of argument upto's region, or with MAXKARG the total. */
static size_t region_bytes(const Gpu *x, const Launch *l, int kind, int64_t T, int upto)
{
	size_t b = 0;
	for (int k = 0; k < l->narg && k < upto; k++)
		if (l->arg[k].kind == kind)
			b += ((size_t)(size_val(x, l->arg[k].s, T) * size_val(x, l->arg[k].s2, T) * (int64_t)l->arg[k].f) + 255) &
			     ~(size_t)255;
	return b;
}

static size_t scratch_bytes(const Gpu *x, const Launch *l, int64_t T, int upto)
{
	return region_bytes(x, l, KA_SCRATCH, T, upto);
}

/* --profile: record ev on the stream; under capture it becomes an event node of the graph. */
static int prof_record(Gpu *x, CUevent ev, char *err, size_t len)
{
	CK(x->capturing ? x->cu.event_record_flags(ev, x->st, CU_EVENT_RECORD_EXTERNAL) : x->cu.event_record(ev, x->st),
	   "cuEventRecord (--profile)");
	return 0;
}

/* Whether the one-shot P2P allreduce is started and a message of `bytes` from `from` to `to` fits it: at most
** `limit` bytes (GLMRUN_P2P_MAX's for the kernel path, the mailbox's for the persistent kernel's tasks). */
static int p2p_fits(const Gpu *x, CUdeviceptr to, CUdeviceptr from, size_t bytes, size_t limit)
{
	return x->p2p_max && bytes <= limit && bytes % 16 == 0 && to % 16 == 0 && from % 16 == 0;
}

/* The one-shot P2P allreduce, when started and the message fits it: 1 launched, 0 not taken. */
static int p2p_launch(Gpu *x, CUdeviceptr to, CUdeviceptr from, size_t cnt, size_t es, char *err, size_t len)
{
	size_t bytes = cnt * es, nv = bytes / 16;
	if (!p2p_fits(x, to, from, bytes, x->p2p_max))
		return 0;
	unsigned nb = (unsigned)((nv + 511) / 512);
	nb = nb < 1 ? 1 : nb > P2P_NBMAX ? P2P_NBMAX : nb;
	long long n = (long long)cnt;
	void *args[] = {&to, &from, &n, &x->p2p_ctl};
	CK(x->cu.launch(x->p2p, nb, 1, 1, 512, 1, 1, 0, x->st, args, NULL), "launching the P2P allreduce");
	x->stats.p2p_calls++;
	return 1;
}

/*
** Whether allreduce launch i (marked by glmc: Launch.inside_next) is left to launch i + 1, which takes
** KA_P2P (k_add_rmsnorm_ar): the one-shot path is started, the message fits it, the step has at most
** P2P_NBMAX rows (one block each) and every buffer of the next kernel is 16-byte aligned.
*/
static int p2p_fused_next(const Gpu *x, int i, int64_t T)
{
	const Cuda *c = &x->g->cuda;
	const Launch *l = &c->l[i], *n = i + 1 < c->nl ? &c->l[i + 1] : NULL;
	if (!l->inside_next || !n || T < n->tmin ||
	    T > n->tmax || T > P2P_NBMAX)
		return 0;
	int p2p = 0;
	for (int k = 0; k < n->narg; k++) {
		p2p |= n->arg[k].kind == KA_P2P;
		if (n->arg[k].kind == KA_BUF && x->ptr[n->arg[k].s.node] % 16)
			return 0;
	}
	size_t bytes = (size_t)size_val(x, l->arg[2].s, T) * elsize(x, l->arg[1].s.node);
	return p2p && p2p_fits(x, x->ptr[l->node], x->ptr[l->arg[1].s.node], bytes, x->p2p_max);
}

/* A collective's destination: its buffer, or its part of the scratch when a kernel reorders the parts next. */
static CUdeviceptr coll_to(const Gpu *x, const Launch *l, int64_t T)
{
	return l->arg[0].kind == KA_SCRATCH ? x->scr + scratch_bytes(x, l, T, 0) : x->ptr[l->arg[0].s.node];
}

/*
** A collective launch (LK_ALLREDUCE / LK_ALLGATHER, see emit_cuda.c): one NCCL call (or the one-shot P2P
** kernel for a small allreduce) on this rank's stream, eager or captured into the decode graph like a
** kernel. Arguments: the destination (a buffer, or the launch's scratch when a kernel reorders the
** gathered parts next), the source, and the source's element count.
*/
static int coll_launch(Gpu *x, const Launch *l, int64_t T, char *err, size_t len)
{
	const Node *n = &x->g->node[l->node];
	if (l->kind == LK_ALLREDUCE && x->g->node[l->arg[1].s.node].dtype != DT_I32) {
		int done = p2p_launch(x, x->ptr[l->node], x->ptr[l->arg[1].s.node], (size_t)size_val(x, l->arg[2].s, T),
		                      elsize(x, l->arg[1].s.node), err, len);
		if (done)
			return done < 0 ? -1 : 0;
	}
	if (!x->comm)
		return seterr(err, len, "plan: %s %%%d (%s:%d) needs an NCCL communicator, and this GPU has none (tp %d)",
		              op_table[n->op].name, l->node, n->src ? n->src : "?", n->line, x->tp);
	int src = l->arg[1].s.node;
	CUdeviceptr to = coll_to(x, l, T);
	size_t cnt = (size_t)size_val(x, l->arg[2].s, T);
	ncclDataType_t dt = x->g->node[src].dtype == DT_I32 ? ncclInt32 : elsize(x, src) == 2 ? ncclBfloat16 : ncclFloat32;
	ncclResult_t r;
	if (l->kind == LK_ALLREDUCE)
		r = x->nc->allreduce((const void *)x->ptr[src], (void *)to, cnt, dt, ncclSum, x->comm, (cudaStream_t)x->st);
	else
		r = x->nc->allgather((const void *)x->ptr[src], (void *)to, cnt, dt, x->comm, (cudaStream_t)x->st);
	if (r != ncclSuccess) {
		char what[256];
		snprintf(what, sizeof what, "%s of %zu values for node %%%d (%s:%d)", launch_name(l), cnt, l->node,
		         n->src ? n->src : "?", n->line);
		return nccl_err(x->nc, r, what, err, len);
	}
	x->stats.nccl_calls++;
	return 0;
}

/* One kernel argument's value, as cuLaunchKernel reads it. */
typedef union {
	CUdeviceptr p;
	int i;
	long long l;
	float f;
} ArgV;

/* Launch l's argument values for a step of T tokens (prog: its KA_PDL flag, p2p: its KA_P2P block), shared
** by launch_step and the persistent kernel's argument records (persist_args), so both pass the same. */
static void arg_values(const Gpu *x, const Launch *l, int64_t T, int prog, CUdeviceptr p2p, ArgV *v)
{
	for (int k = 0; k < l->narg; k++) {
		const KArg *a = &l->arg[k];
		switch (a->kind) {
		case KA_BUF: v[k].p = x->ptr[a->s.node]; break;
		case KA_ROPE: v[k].p = x->rope[a->s.node]; break;
		case KA_SCRATCH: v[k].p = x->scr + scratch_bytes(x, l, T, k); break;
		case KA_SEQ: v[k].p = x->seq; break;
		case KA_INT: v[k].i = (int)size_val(x, a->s, T); break;
		case KA_LONG: v[k].l = size_val(x, a->s, T); break;
		case KA_RANK: v[k].i = x->rank; break;
		case KA_ZERO: v[k].p = x->zero + region_bytes(x, l, KA_ZERO, T, k); break;
		case KA_PDL: v[k].i = prog; break;
		case KA_P2P: v[k].p = p2p; break;
		default: v[k].f = (float)a->f; break;
		}
	}
}

/* Whether a step's rows are one sequence's chunk: the same slot (seq NULL: all slot 0) at consecutive
** positions. */
static int one_chunk(const int32_t *seq, const int32_t *pos, int64_t T)
{
	for (int64_t i = 1; i < T; i++)
		if ((seq && seq[i] != seq[0]) || pos[i] != pos[0] + (int32_t)i)
			return 0;
	return 1;
}

/* Launch every kernel of the plan for a step of T tokens on the stream (eagerly or under capture); one_seq:
** the rows are one sequence at consecutive positions (launch_runs). */
static int launch_step(Gpu *x, int64_t T, int one_seq, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	int after_kernel = 0; /* the last thing queued on the stream was one of the plan's kernels */
	for (int i = 0; i < c->nl; i++) {
		const Launch *l = &c->l[i];
		if (!launch_runs(l, T, one_seq))
			continue;
		if (l->kind != LK_KERNEL) {
			/* --profile times a collective as it does a kernel: its share of the step is issue 10's figure */
			if (x->prof_ev && prof_record(x, x->prof_ev[2 * i], err, len))
				return -1;
			if (l->kind == LK_ALLREDUCE && p2p_fused_next(x, i, T))
				x->p2p_next = 1, x->stats.p2p_calls++;
			else if (coll_launch(x, l, T, err, len))
				return -1;
			after_kernel = 0;
			if (x->prof_ev && prof_record(x, x->prof_ev[2 * i + 1], err, len))
				return -1;
			continue;
		}
		/* A linear's GEMM (steps above the decode GEMVs' tokens) may go through cuBLASLt; no other launch
		** does. Inside a graph capture (a decode step of 9..16 sequences) only over float weights: the
		** matmul is captured with the fixed workspace, while blocks would dequantize in every replay. */
		if (x->gemm[i] && (!x->capturing || x->wq[x->g->node[l->node].in[1]] < 0)) {
			int done = lt_linear(x, l->node, T, err, len);
			if (done < 0)
				return -1;
			if (done) {
				after_kernel = 0;
				continue;
			}
		}
		/* programmatic dependent launch (--pdl): only the kernels that take KA_PDL (the decode GEMVs, which
		** ask L2 for their first weights before they wait), after another kernel; never under --profile */
		int prog = 0;
		for (int k = 0; k < l->narg; k++)
			prog |= l->arg[k].kind == KA_PDL;
		prog = prog && after_kernel && x->stats.pdl && !x->prof_ev;
		void *args[MAXKARG];
		ArgV v[MAXKARG];
		arg_values(x, l, T, prog, x->p2p_next ? x->p2p_ctl : 0, v);
		for (int k = 0; k < l->narg; k++)
			args[k] = &v[k];
		x->p2p_next = 0;
		unsigned gx = (unsigned)size_val(x, l->grid[0], T), gy = (unsigned)size_val(x, l->grid[1], T),
		         gz = (unsigned)size_val(x, l->grid[2], T);
		if (!gx || !gy || !gz)
			continue;
		if (x->prof_ev && prof_record(x, x->prof_ev[2 * i], err, len))
			return -1;
		CUresult r;
		if (prog) {
			/* this kernel's blocks may start (and ask L2 for weights) while the kernel before finishes; it
			** waits for it (kernels.cuh, glm_pdl_wait) */
			CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
			at.value.programmaticStreamSerializationAllowed = 1;
			CUlaunchConfig cfg = {.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = (unsigned)l->block,
			                      .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = (unsigned)l->smem, .hStream = x->st,
			                      .attrs = &at, .numAttrs = 1};
			r = x->cu.launch_ex(&cfg, x->fn[i], args, NULL);
		} else {
			r = x->cu.launch(x->fn[i], gx, gy, gz, (unsigned)l->block, 1, 1, (unsigned)l->smem, x->st, args, NULL);
		}
		after_kernel = 1;
		if (r == CUDA_SUCCESS && x->prof_ev && prof_record(x, x->prof_ev[2 * i + 1], err, len))
			return -1;
		if (r != CUDA_SUCCESS) {
			const Node *n = &x->g->node[l->node];
			char what[256];
			snprintf(what, sizeof what, "launching %s for %s node %%%d (%s:%d)", l->kernel, op_table[n->op].name,
			         l->node, n->src ? n->src : "?", n->line);
			return cuerr(x, r, what, err, len);
		}
	}
	return 0;
}

/* The sampler: SAMPLE_NB blocks a row (they split a greedy argmax), blocks (b, .) on logits row first + b,
** writing row b's token and position where the next step reads them. rows <= nslots: the split's
** partials and counters are sized so. */
static int launch_sample(Gpu *x, int64_t first, int rows, char *err, size_t len)
{
	CUdeviceptr logits = x->ptr[x->logits] + (CUdeviceptr)(first * x->V * (int64_t)elsize(x, x->logits));
	CUdeviceptr tok = x->ptr[x->tokens], pos = x->ptr[x->pos];
	int cap = x->ring_cap, V = (int)x->V;
	if (rows > x->nslots)
		return seterr(err, len, "the sampler on %d rows; its buffers hold %d", rows, x->nslots);
	void *args[] = {&x->ring, &cap, &tok, &pos, &x->step, &logits, &V, &x->params, &x->seq, &x->part_v, &x->part_i,
	                &x->done, &x->nf};
	CK(x->cu.launch(x->sample, (unsigned)rows, SAMPLE_NB, 1, 1024, 1, 1, 0, x->st, args, NULL),
	   "launching the sampler");
	return 0;
}

/* Queue the copies of the sampled tokens of `rows` rows and (optionally) their logits into pinned memory. */
static int queue_readback(Gpu *x, int rows, int logits, char *err, size_t len)
{
	CK(x->cu.dtoh_async(x->host_tok, x->ptr[x->tokens], 4 * (size_t)rows, x->st), "cuMemcpyDtoHAsync (token)");
	CK(x->cu.dtoh_async(x->host_nf, x->nf, 8 * (size_t)rows, x->st), "cuMemcpyDtoHAsync (NaN check)");
	if (logits) {
		size_t es = elsize(x, x->logits);
		CK(x->cu.dtoh_async(x->host_raw, x->ptr[x->logits], (size_t)(rows * x->V) * es, x->st),
		   "cuMemcpyDtoHAsync (logits)");
	}
	return 0;
}

/* The sampler's verdict on the rows it just sampled (read back with their tokens): a NaN or Inf in a
** row's logits makes its token meaningless, so the step fails rather than answer with it. */
static int logits_finite(Gpu *x, int rows, char *err, size_t len)
{
	for (int r = 0; r < rows; r++)
		if (x->host_nf[2 * r + 1])
			return seterr(err, len, "the logits hold NaN or Inf (sampled row %d): the model or its weights produce "
			              "non-finite values (glmrun --verify names the first layer)", r);
	return 0;
}

/* The pinned logits rows as float32. */
static void logits_out(Gpu *x, int rows, float *dst)
{
	size_t cnt = (size_t)(rows * x->V);
	if (elsize(x, x->logits) == 4)
		memcpy(dst, x->host_raw, cnt * 4);
	else
		for (size_t i = 0; i < cnt; i++)
			dst[i] = ref_bf16_to_f32(((uint16_t *)x->host_raw)[i]);
}

/* Fill n ints of the device array at d with v (a small host write before a step). */
static int fill_ints(Gpu *x, CUdeviceptr d, int32_t v, int64_t n, char *err, size_t len)
{
	int32_t *h = malloc(sizeof *h * (size_t)n);
	if (!h)
		return seterr(err, len, "out of memory");
	for (int64_t i = 0; i < n; i++)
		h[i] = v;
	CUresult r = x->cu.htod(d, h, sizeof *h * (size_t)n);
	free(h);
	return r == CUDA_SUCCESS ? 0 : cuerr(x, r, "cuMemcpyHtoD (step buffer)", err, len);
}

/* The T rows of logits of the eager step just launched, as float32 (waits for the step). */
static int step_logits(Gpu *x, int64_t T, float *logits, char *err, size_t len)
{
	size_t es = elsize(x, x->logits), cnt = (size_t)(T * x->V);
	void *raw = malloc(cnt * es);
	if (!raw)
		return seterr(err, len, "out of memory");
	CUresult r = x->cu.stream_sync(x->st);
	if (r == CUDA_SUCCESS)
		r = x->cu.dtoh(raw, x->ptr[x->logits], cnt * es);
	if (r != CUDA_SUCCESS)
		return free(raw), cuerr(x, r, "prefill", err, len);
	for (size_t k = 0; k < cnt; k++)
		logits[k] = es == 4 ? ((float *)raw)[k] : ref_bf16_to_f32(((uint16_t *)raw)[k]);
	free(raw);
	return 0;
}

int gpu_prefill(Gpu *x, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits, char *err,
                size_t len)
{
	return gpu_prefill_slot(x, 0, tokens, T, pos0, next, logits, err, len);
}

int gpu_prefill_slot(Gpu *x, int slot, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits,
                     char *err, size_t len)
{
	if (T < 1 || T > x->maxT)
		return seterr(err, len, "prefill of %lld tokens, buffers sized for 1..%lld", (long long)T, (long long)x->maxT);
	if (slot < 0 || slot >= x->nslots)
		return seterr(err, len, "prefill into sequence slot %d; the caches hold %d", slot, x->nslots);
	if (fill_ints(x, x->seq, slot, T, err, len))
		return -1;
	int32_t *pos = malloc(sizeof *pos * (size_t)T);
	if (!pos)
		return seterr(err, len, "out of memory");
	for (int64_t i = 0; i < T; i++)
		pos[i] = pos0 + (int32_t)i;
	CUresult r = x->cu.htod_async(x->ptr[x->tokens], tokens, (size_t)T * 4, x->st);
	if (r == CUDA_SUCCESS)
		r = x->cu.htod_async(x->ptr[x->pos], pos, (size_t)T * 4, x->st);
	if (r != CUDA_SUCCESS)
		return free(pos), cuerr(x, r, "cuMemcpyHtoDAsync (prompt)", err, len);
	if (launch_step(x, T, 1, err, len))
		return free(pos), -1;
	x->stats.kernel_launches_eager += x->stats.kernels_per_step;
	/* All rows of logits, then the sampler, which expects the position of the row it samples in pos[0]. */
	if (logits && step_logits(x, T, logits, err, len))
		return free(pos), -1;
	int32_t last = pos0 + (int32_t)T - 1;
	r = x->cu.htod_async(x->ptr[x->pos], &last, 4, x->st);
	free(pos);
	if (r != CUDA_SUCCESS)
		return cuerr(x, r, "cuMemcpyHtoDAsync (position)", err, len);
	if (launch_sample(x, T - 1, 1, err, len) || queue_readback(x, 1, 0, err, len))
		return -1;
	CK(x->cu.stream_sync(x->st), "prefill");
	*next = *x->host_tok;
	return logits_finite(x, 1, err, len);
}

/* Several sequences' prompt pieces as one eager step: the rows' slots and positions come from the
** caller, then the sampler runs on each part's last row: once for the leading one-token parts together,
** then once per part with row 0 of the step buffer set to the part's position, slot, sampling step and
** (per-row samplers) parameters. */
int gpu_prefill_parts(Gpu *x, int64_t T, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int np,
                      const int64_t *last, const int32_t *step, const float *samp, int32_t *next, float *logits, char *err,
                      size_t len)
{
	if (T < 1 || T > x->maxT)
		return seterr(err, len, "prefill of %lld tokens, buffers sized for 1..%lld", (long long)T, (long long)x->maxT);
	if (np < 1 || np > x->nslots)
		return seterr(err, len, "a prefill of %d sequences; the caches hold %d", np, x->nslots);
	for (int64_t i = 0; i < T; i++)
		if (seq[i] < 0 || seq[i] >= x->nslots)
			return seterr(err, len, "prefill row %lld names sequence slot %d; the caches hold %d", (long long)i, seq[i],
			              x->nslots);
	for (int k = 0; k < np; k++) {
		if (last[k] < 0 || last[k] >= T)
			return seterr(err, len, "prefill part %d ends at row %lld of a %lld-row step", k, (long long)last[k],
			              (long long)T);
		if (!x->samp_rows && memcmp(samp + 4 * k, x->samp0, 16))
			return seterr(err, len, "part %d samples otherwise than the rest, but this plan's sampler (glm_sample, "
			              "from an older glmc) takes one setting for every row: recompile the plan", k);
	}
	CK(x->cu.htod_async(x->ptr[x->tokens], tokens, (size_t)T * 4, x->st), "cuMemcpyHtoDAsync (prompts)");
	CK(x->cu.htod_async(x->ptr[x->pos], pos, (size_t)T * 4, x->st), "cuMemcpyHtoDAsync (positions)");
	CK(x->cu.htod_async(x->seq, seq, (size_t)T * 4, x->st), "cuMemcpyHtoDAsync (sequence slots)");
	if (launch_step(x, T, one_chunk(seq, pos, T), err, len))
		return -1;
	x->stats.kernel_launches_eager += x->stats.kernels_per_step;
	if (logits && step_logits(x, T, logits, err, len))
		return -1;
	/* Leading one-token parts (glmrun serve's decoding sequences in a mixed step) sit at rows 0..nd-1 with
	** their positions and slots already there: one sampler launch takes them all. */
	int nd = 0;
	while (x->samp_rows && nd < np && last[nd] == nd)
		nd++;
	if (nd > 1) {
		CK(x->cu.htod_async(x->step, step, 4 * (size_t)nd, x->st), "cuMemcpyHtoDAsync (sampling steps)");
		CK(x->cu.htod_async(x->params, samp, 16 * (size_t)nd, x->st), "cuMemcpyHtoDAsync (sampling parameters)");
		if (launch_sample(x, 0, nd, err, len) || queue_readback(x, nd, 0, err, len))
			return -1;
	} else
		nd = 0;
	for (int k = nd; k < np; k++) {
		/* pageable sources: each copy has left the host before its call returns */
		CK(x->cu.htod_async(x->ptr[x->pos], &pos[last[k]], 4, x->st), "cuMemcpyHtoDAsync (position)");
		CK(x->cu.htod_async(x->seq, &seq[last[k]], 4, x->st), "cuMemcpyHtoDAsync (sequence slot)");
		CK(x->cu.htod_async(x->step, &step[k], 4, x->st), "cuMemcpyHtoDAsync (sampling step)");
		if (x->samp_rows)
			CK(x->cu.htod_async(x->params, samp + 4 * k, 16, x->st), "cuMemcpyHtoDAsync (sampling parameters)");
		if (launch_sample(x, last[k], 1, err, len))
			return -1;
		CK(x->cu.dtoh_async(x->host_tok + k, x->ptr[x->tokens], 4, x->st), "cuMemcpyDtoHAsync (token)");
		CK(x->cu.dtoh_async(x->host_nf + 2 * k, x->nf, 8, x->st), "cuMemcpyDtoHAsync (NaN check)");
	}
	CK(x->cu.stream_sync(x->st), "prefill");
	memcpy(next, x->host_tok, sizeof *next * (size_t)np);
	return logits_finite(x, np, err, len);
}

int gpu_set_rows(Gpu *x, int rows, const int32_t *tokens, const int32_t *pos, const int32_t *seq, const int32_t *step,
                 const float *samp, char *err, size_t len)
{
	if (rows < 1 || rows > x->nslots)
		return seterr(err, len, "a step of %d sequences; the caches hold %d", rows, x->nslots);
	for (int r = 0; r < rows; r++)
		if (seq[r] < 0 || seq[r] >= x->nslots)
			return seterr(err, len, "row %d names sequence slot %d; the caches hold %d", r, seq[r], x->nslots);
	for (int r = 0; samp && !x->samp_rows && r < rows; r++)
		if (memcmp(samp + 4 * r, x->samp0, 16))
			return seterr(err, len, "row %d samples otherwise than the rest, but this plan's sampler (glm_sample, "
			              "from an older glmc) takes one setting for every row: recompile the plan", r);
	if (samp && x->samp_rows)
		CK(x->cu.htod(x->params, samp, 16 * (size_t)rows), "cuMemcpyHtoD (sampling parameters)");
	CK(x->cu.htod(x->ptr[x->tokens], tokens, 4 * (size_t)rows), "cuMemcpyHtoD (tokens)");
	CK(x->cu.htod(x->ptr[x->pos], pos, 4 * (size_t)rows), "cuMemcpyHtoD (positions)");
	CK(x->cu.htod(x->seq, seq, 4 * (size_t)rows), "cuMemcpyHtoD (sequence slots)");
	CK(x->cu.htod(x->step, step, 4 * (size_t)rows), "cuMemcpyHtoD (step counters)");
	return 0;
}

/* Row 0's token in the step buffer, where the sampler of the step before wrote its pick: the previous
** step has synchronised its stream, so a plain copy lands before the next replay reads it. */
int gpu_feed(Gpu *x, int32_t tok, char *err, size_t len)
{
	CK(x->cu.htod(x->ptr[x->tokens], &tok, 4), "cuMemcpyHtoD (forced token)");
	return 0;
}

int gpu_decode(Gpu *x, int32_t *next, float *logits, char *err, size_t len)
{
	return gpu_decode_rows(x, 1, next, logits, err, len);
}

/* Each bucket (number of rows) has its own graph, captured on its first step; the rows' tokens, positions
** and slots are already in the step buffer (the previous replay's sampler or gpu_set_rows put them there). */
int gpu_decode_rows(Gpu *x, int rows, int32_t *next, float *logits, char *err, size_t len)
{
	if (rows < 1 || rows > x->nslots)
		return seterr(err, len, "a step of %d sequences; the caches hold %d", rows, x->nslots);
	if (!x->exec[rows] || x->captured_logits[rows] != (logits != NULL)) {
		if (x->exec[rows]) {
			x->cu.graph_exec_destroy(x->exec[rows]);
			x->cu.graph_destroy(x->graph[rows]);
			x->exec[rows] = NULL;
		}
		CK(x->cu.capture_begin(x->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
		x->capturing = 1;
		int rc = rows == 1 && x->pfn ? persist_launch(x, 0, err, len) : launch_step(x, rows, rows == 1, err, len);
		x->capturing = 0;
		if (!rc && logits)
			rc = queue_readback(x, rows, 1, err, len);
		if (!rc)
			rc = launch_sample(x, 0, rows, err, len);
		if (!rc)
			rc = queue_readback(x, rows, 0, err, len);
		CUresult r = x->cu.capture_end(x->st, &x->graph[rows]);
		if (rc)
			return -1;
		if (r != CUDA_SUCCESS)
			return cuerr(x, r, "cuStreamEndCapture", err, len);
		CK(x->cu.graph_inst(&x->exec[rows], x->graph[rows], 0), "cuGraphInstantiate");
		x->captured_logits[rows] = logits != NULL;
	}
	CK(x->cu.graph_launch(x->exec[rows], x->st), "cuGraphLaunch");
	x->stats.graph_launches++;
	x->stats.decode_steps++;
	CK(x->cu.stream_sync(x->st), "decode step");
	if (logits)
		logits_out(x, rows, logits);
	memcpy(next, x->host_tok, 4 * (size_t)rows);
	return logits_finite(x, rows, err, len);
}

int gpu_step_outputs(Gpu *x, const int32_t *tokens, const int32_t *pos, int64_t T, float **out, char *err, size_t len)
{
	if (T < 1 || T > x->maxT)
		return seterr(err, len, "step of %lld tokens, buffers sized for 1..%lld", (long long)T, (long long)x->maxT);
	CK(x->cu.htod(x->ptr[x->tokens], tokens, (size_t)T * 4), "cuMemcpyHtoD (tokens)");
	CK(x->cu.htod(x->ptr[x->pos], pos, (size_t)T * 4), "cuMemcpyHtoD (positions)");
	if (fill_ints(x, x->seq, 0, T, err, len))
		return -1;
	if (launch_step(x, T, one_chunk(NULL, pos, T), err, len))
		return -1;
	CK(x->cu.stream_sync(x->st), "step");
	const Graph *g = x->g;
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (!out[i] || n->kind != VK_ACT)
			continue;
		size_t cnt = (size_t)node_numel(n, T, x->S), es = elsize(x, i);
		void *tmp = malloc(cnt * es);
		if (!tmp)
			return seterr(err, len, "out of memory");
		CUresult r = x->cu.dtoh(tmp, x->ptr[i], cnt * es);
		if (r != CUDA_SUCCESS)
			return free(tmp), cuerr(x, r, "cuMemcpyDtoH", err, len);
		for (size_t k = 0; k < cnt; k++)
			out[i][k] = n->dtype == DT_I32 ? (float)((int32_t *)tmp)[k]
			            : es == 2         ? ref_bf16_to_f32(((uint16_t *)tmp)[k])
			                              : ((float *)tmp)[k];
		free(tmp);
	}
	return 0;
}

int64_t gpu_max_seq(const Gpu *x)
{
	return x->S;
}

void gpu_stats(const Gpu *x, GpuStats *s)
{
	*s = x->stats;
}

void gpu_drop_graphs(Gpu *x)
{
	if (!x || !x->cu.so || !x->ctx)
		return;
	for (int b = 0; x->exec && b <= x->nslots; b++)
		if (x->exec[b])
			x->cu.graph_exec_destroy(x->exec[b]), x->cu.graph_destroy(x->graph[b]), x->exec[b] = NULL;
}

void gpu_close(Gpu *x)
{
	if (!x)
		return;
	if (x->cu.so && x->ctx) {
		gpu_drop_graphs(x);
		if (x->mod)
			x->cu.mod_unload(x->mod);
		if (x->pmod)
			x->cu.mod_unload(x->pmod);
		CUdeviceptr m[] = {x->wmem, x->amem, x->cmem, x->smem, x->rope_mem, x->p2p_mbox, x->p2p_ctl, x->pmem};
		for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
			if (m[i])
				x->cu.free(m[i]);
		if (x->host_tok)
			x->cu.free_host(x->host_tok);
		if (x->host_logits)
			x->cu.free_host(x->host_logits);
		if (x->host_raw)
			x->cu.free_host(x->host_raw);
		if (x->lt.h)
			x->lt.destroy(x->lt.h), x->cu.free(x->lt.ws);
		if (x->qscr)
			x->cu.free(x->qscr);
		if (x->st)
			x->cu.stream_destroy(x->st);
		x->cu.ctx_release(x->dev);
	}
	if (x->lt.so)
		dlclose(x->lt.so);
	if (x->cu.so)
		dlclose(x->cu.so);
	free(x->fn), free(x->gemm), free(x->ptr), free(x->rope), free(x->wq);
	free(x->graph), free(x->exec), free(x->captured_logits);
	free(x->ptrace), free(x->pcoll), free(x->psegtasks), free(x->plane);
	free(x);
}

/*
** ---- Quantized weights on the GPU (ops/quant.cuh, emit_cuda.c q_choose) ----
**
** A weight the plan keeps quantized (Cuda.wq) is uploaded as its GGUF blocks, each row padded to 16 bytes.
** Random plans generate every weight on the GPU with the generators of ops/quant.cuh, which make the same
** bytes and floats as runtime/formats/weights.c makes on the CPU (so --verify compares like with like), without
** staging anything on the host: quantized weights as blocks (dequantized in place of the float
** conversion when the plan keeps them as floats), float weights with k_rand_float.
*/

/* Device bytes of a weight kept as blocks. */
static size_t q_bytes(const Gpu *x, int node)
{
	const Node *n = &x->g->node[node];
	int64_t K = n->dim[n->ndim - 1];
	return quant_dev_row_bytes(x->wq[node], K) * (size_t)(node_numel(n, 0, 0) / K);
}

/* One of the plan's helper kernels (emit_cuda.c emit_qhelpers): `base` alone, or with the type id. */
static int q_fn(Gpu *x, CUfunction *f, const char *base, int id, char *err, size_t len)
{
	char name[64];
	if (id >= 0)
		snprintf(name, sizeof name, "%s_%d", base, id);
	else
		snprintf(name, sizeof name, "%s", base);
	CUresult r = x->cu.mod_fn(f, x->mod, name);
	if (r != CUDA_SUCCESS)
		return seterr(err, len, "plan: helper kernel %s is missing (a plan from an older glmc? recompile it)", name);
	return 0;
}

/* Launch a helper over n threads (blocks of 256) and wait for it. */
static int q_launch(Gpu *x, CUfunction f, long long n, void **args, const char *what, char *err, size_t len)
{
	if (n <= 0)
		return 0;
	CK(x->cu.launch(f, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, x->st, args, NULL), what);
	CK(x->cu.stream_sync(x->st), what);
	return 0;
}

/*
** Weight wi of a random plan, generated in place: rank's part of tp.
** The generators map the part to the whole tensor: floats by elements (part, inner) along the split
** axis; blocks by rows (part, inner) for a leading axis, by block columns (cparts, crank) for the last.
*/
static int q_upload_random(Gpu *x, int wi, int rank, int tp, char *err, size_t len)
{
	const Graph *g = x->g;
	const WeightRef *w = &g->w[wi];
	const Node *n = &g->node[w->node];
	unsigned long long seed = weights_random_seed(n->name);
	int last = n->ndim - 1, ax = w->split >= 0 && tp > 1 ? w->split : -1, vec = n->ndim == 1;
	long long numel = node_numel(n, 0, 0), K = n->dim[last], rows = numel / K, part = numel, inner = 1;
	int tpr = 1, rk = 0, cparts = ax == last ? tp : 1, crank = ax == last ? rank : 0, cols = (int)(K * cparts);
	CUdeviceptr dst = x->ptr[w->node];
	CUfunction f;
	char what[300];
	snprintf(what, sizeof what, "generating random weight '%s'", n->name);
	if (ax >= 0) {
		part = n->dim[ax], tpr = tp, rk = rank;
		for (int i = ax + 1; i < n->ndim; i++)
			inner *= n->dim[i];
	}
	if (w->dtype != DT_Q) {
		size_t es = elsize(x, w->node);
		int dt = es == 4 ? DT_F32 : g->cuda.wconv >= 0 ? g->cuda.wconv : w->dtype;
		char fname[32];
		snprintf(fname, sizeof fname, "glm_rand_%s", dt == DT_F32 ? "f32" : dt == DT_BF16 ? "bf16" : "f16");
		if (q_fn(x, &f, fname, -1, err, len))
			return -1;
		void *args[] = {&dst, &numel, &seed, &cols, &vec, &part, &inner, &tpr, &rk};
		return q_launch(x, f, numel, args, what, err, len);
	}
	/* blocks: rows of the leading axes, so a leading split's inner extent is in rows */
	if (ax >= 0 && ax < last)
		inner /= K;
	else
		part = rows, inner = 1, tpr = 1, rk = 0;
	int q = w->qtype, bpr = (int)(K / quant_block_size(q));
	long long stride = (long long)quant_dev_row_bytes(q, K), nb = rows * stride, Kw = K * cparts;
	CUdeviceptr blocks = dst;
	if (!stride)
		return seterr(err, len, "random weight '%s': type %s has no GPU generator", n->name, quant_type_name(q));
	if (x->wq[w->node] < 0) {
		CUresult r = x->cu.alloc(&blocks, (size_t)nb);
		if (r != CUDA_SUCCESS)
			return cuerr(x, r, "cuMemAlloc (random blocks to dequantize)", err, len);
	}
	void *args[] = {&blocks, &rows, &bpr, &stride, &seed, &Kw, &part, &inner, &tpr, &rk, &cparts, &crank};
	int rc = q_fn(x, &f, "glm_qrand", q, err, len) || q_launch(x, f, nb, args, what, err, len) ? -1 : 0;
	if (!rc && x->wq[w->node] < 0) {
		/* the plan reads this weight as floats: dequantize the blocks into it */
		int k = (int)K;
		void *dargs[] = {&dst, &blocks, &numel, &k};
		rc = q_fn(x, &f, "glm_qdequant", q, err, len) || q_launch(x, f, numel, dargs, what, err, len) ? -1 : 0;
	}
	if (blocks != dst)
		x->cu.free(blocks);
	return rc;
}

/* Weight wi's blocks from the checkpoint (rank's part of tp), rows padded to the device stride, through
** the staging buffer. */
static int q_upload_blocks(Gpu *x, const Weights *d, int wi, int rank, int tp, unsigned char *stage, size_t cap, char *err,
                           size_t len)
{
	const Graph *g = x->g;
	const WeightRef *w = &g->w[wi];
	const Node *n = &g->node[w->node];
	int64_t K = n->dim[n->ndim - 1], rows = node_numel(n, 0, 0) / K;
	size_t stride = quant_dev_row_bytes(x->wq[w->node], K);
	int64_t per = stride ? (int64_t)(cap / stride) : 0;
	if (per < 1)
		return seterr(err, len, "weight '%s': rows of %zu bytes do not fit the upload buffer", n->name, stride);
	for (int64_t r0 = 0; r0 < rows; r0 += per) {
		int64_t nr = rows - r0 < per ? rows - r0 : per;
		if (weights_load_raw(d, g, w, rank, tp, r0, nr, stage, stride, err, len))
			return -1;
		for (int64_t r = 0; r < nr; r++) /* the GGUF blocks into their device slots (Q6_K) */
			quant_dev_spread(x->wq[w->node], stage + (size_t)r * stride, K);
		CK(x->cu.htod(x->ptr[w->node] + (CUdeviceptr)((size_t)r0 * stride), stage, (size_t)nr * stride),
		   "cuMemcpyHtoD (quantized weights)");
	}
	return 0;
}

/*
** cuBLASLt for a prefill linear over a quantized weight: from QLT_MIN_T rows on, dequantize the weight
** into a scratch buffer of the activation type and let cuBLASLt run the GEMM (its GEMM is much faster
** than k_qlinear_gemm, and the extra pass over the weight is small next to T·N·K work); below that,
** or when the scratch cannot be allocated, the plan's k_qlinear_gemm runs. 1: *wp is the dequantized
** weight; 0: use the kernel; -1: error. QLT_MIN_T is a first guess to measure.
*/
#define QLT_MIN_T 32
static int lt_qweight(Gpu *x, int wnode, int64_t T, CUdeviceptr *wp, char *err, size_t len)
{
	const Node *n = &x->g->node[wnode];
	if (T < QLT_MIN_T)
		return 0;
	long long numel = node_numel(n, 0, 0);
	int K = (int)n->dim[n->ndim - 1];
	size_t need = (size_t)numel * dtype_size(x->g->cuda.act);
	if (need > x->qscr_size) {
		if (x->qscr)
			x->cu.free(x->qscr);
		x->qscr = 0, x->qscr_size = 0;
		if (x->cu.alloc(&x->qscr, need) != CUDA_SUCCESS) {
			x->qscr = 0;
			return 0;
		}
		x->qscr_size = need;
	}
	CUfunction f;
	if (q_fn(x, &f, "glm_qdequant", x->wq[wnode], err, len))
		return -1;
	CUdeviceptr src = x->ptr[wnode];
	void *args[] = {&x->qscr, &src, &numel, &K};
	CK(x->cu.launch(f, (unsigned)((numel + 255) / 256), 1, 1, 256, 1, 1, 0, x->st, args, NULL),
	   "launching glm_qdequant (prefill)");
	*wp = x->qscr;
	return 1;
}

/* Whether a GPU can be used here: the driver loads and reports at least one device. */
int gpu_present(void)
{
	Cu cu;
	char err[256];
	int n = 0;
	int ok = cu_load(&cu, err, sizeof err) == 0 && cu.init(0) == CUDA_SUCCESS &&
	         cu.dev_count(&n) == CUDA_SUCCESS && n > 0;
	if (cu.so)
		dlclose(cu.so);
	return ok;
}

/* The device bytes of weight node id (what a step reads when it reads all of it): as uploaded: its GGUF
** blocks (rows padded to 16 bytes) when it stays quantized on the GPU, else its elements at the device
** type. */
size_t gpu_weight_bytes(const Gpu *x, int id)
{
	if (x->wq && x->wq[id] >= 0)
		return q_bytes(x, id);
	return (size_t)node_numel(&x->g->node[id], 0, 0) * elsize(x, id);
}

/* One --profile step: the plan's decode kernels and the sampler, each between its two events. */
static int prof_step(Gpu *x, char *err, size_t len)
{
	int nl = x->g->cuda.nl;
	if (launch_step(x, 1, 1, err, len) || prof_record(x, x->prof_ev[2 * nl], err, len) || launch_sample(x, 0, 1, err, len))
		return -1;
	return prof_record(x, x->prof_ev[2 * nl + 1], err, len);
}

/*
** --profile: `steps` decode steps with an event before and after every kernel and collective, averaged. The step is
** captured into a graph whose event nodes sit between the kernels, so the times are those of a graph
** replay without the host's launch gaps; with `eager`, or when the capture fails (an old driver), the
** step runs eagerly and *graph says so. us[i] is launch i's time (0 when it is not launched at T = 1).
*/
int gpu_profile(Gpu *x, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	int ne = 2 * c->nl + 2, rc = 0, nok = 0;
	if (x->pfn && !x->ptrace && persist_trace(x, steps < 3 ? steps : 3, err, len))
		return -1;
	CUevent *ev = calloc((size_t)ne, sizeof *ev);
	if (!ev)
		return seterr(err, len, "out of memory");
	for (int i = 0; i < ne && !rc; i++) {
		CUresult r = x->cu.event_create(&ev[i], CU_EVENT_DEFAULT);
		if (r != CUDA_SUCCESS)
			rc = cuerr(x, r, "cuEventCreate (--profile)", err, len);
	}
	CUgraph pg = NULL;
	CUgraphExec pe = NULL;
	*graph = 0;
	x->prof_ev = ev;
	if (!rc && !eager && x->cu.capture_begin(x->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
		char e2[256];
		x->capturing = 1;
		int bad = prof_step(x, e2, sizeof e2);
		x->capturing = 0;
		CUresult r = x->cu.capture_end(x->st, &pg);
		if (!bad && r == CUDA_SUCCESS && x->cu.graph_inst(&pe, pg, 0) == CUDA_SUCCESS)
			*graph = 1;
		else if (pg) {
			x->cu.graph_destroy(pg);
			pg = NULL;
		}
	}
	for (int i = 0; i < c->nl; i++)
		us[i] = 0;
	*sample_us = 0;
	for (int s = 0; s < steps && !rc; s++) {
		CUresult r;
		if (*graph) {
			r = x->cu.graph_launch(pe, x->st);
			if (r != CUDA_SUCCESS) {
				rc = cuerr(x, r, "cuGraphLaunch (--profile)", err, len);
				break;
			}
		} else if ((rc = prof_step(x, err, len)))
			break;
		if ((r = x->cu.stream_sync(x->st)) != CUDA_SUCCESS) {
			rc = cuerr(x, r, "--profile step", err, len);
			break;
		}
		for (int i = 0; i <= c->nl && !rc; i++) {
			if (i < c->nl && !(c->l[i].tmin <= 1 && 1 <= c->l[i].tmax))
				continue;
			float ms = 0;
			r = x->cu.event_elapsed(&ms, ev[2 * i], ev[2 * i + 1]);
			if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_NOT_READY)
				continue; /* a launch skipped for an empty grid recorded nothing */
			if (r != CUDA_SUCCESS)
				rc = cuerr(x, r, "cuEventElapsedTime (--profile)", err, len);
			else if (i < c->nl)
				us[i] += 1e3 * ms / steps, nok++;
			else
				*sample_us += 1e3 * ms / steps, nok++;
		}
	}
	x->prof_ev = NULL;
	if (pe)
		x->cu.graph_exec_destroy(pe);
	if (pg)
		x->cu.graph_destroy(pg);
	for (int i = 0; i < ne; i++)
		if (ev[i])
			x->cu.event_destroy(ev[i]);
	free(ev);
	/* Event nodes that gave no times at all (a driver that does not time them): measure eagerly. */
	if (!rc && *graph && !nok)
		return gpu_profile(x, steps, 1, us, sample_us, graph, err, len);
	return rc;
}

/*
** Multi-GPU additions, driven by ranks.c.
*/

int gpu_count(int *n, char *err, size_t len)
{
	Gpu x = {0};
	*n = 0;
	if (cu_load(&x.cu, err, len))
		return -1;
	CUresult r = x.cu.init(0);
	if (r == CUDA_ERROR_NO_DEVICE)
		r = CUDA_SUCCESS; /* counted as 0 below */
	else if (r == CUDA_SUCCESS)
		r = x.cu.dev_count(n);
	int rc = r == CUDA_SUCCESS ? 0 : cuerr(&x, r, "cuInit / cuDeviceGetCount", err, len);
	if (!rc && *n < 1)
		rc = seterr(err, len, "--device cuda: no GPU found; run with --device cpu");
	dlclose(x.cu.so);
	return rc;
}

/* Peer access is per context pair and one-way: this rank's context gets to reach the peer's memory
** (NCCL's P2P transport and the one-shot allreduce read and write it directly). */
int gpu_enable_peer(Gpu *x, int peer, char *err, size_t len)
{
	CUdevice pd;
	int can = 0;
	CK(x->cu.dev_get(&pd, peer), "cuDeviceGet (peer)");
	CK(x->cu.can_peer(&can, x->dev, pd), "cuDeviceCanAccessPeer");
	if (!can)
		return 0;
	CUcontext pc;
	CK(x->cu.ctx_retain(&pc, pd), "cuDevicePrimaryCtxRetain (peer)");
	CK(x->cu.ctx_set(x->ctx), "cuCtxSetCurrent");
	CUresult r = x->cu.enable_peer(pc, 0);
	/* The peer's own rank holds its primary context, so this reference can go at once. */
	x->cu.ctx_release(pd);
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
		return cuerr(x, r, "cuCtxEnablePeerAccess", err, len);
	return 1;
}

void gpu_set_comm(Gpu *x, const Nccl *nc, void *comm)
{
	x->nc = nc, x->comm = comm;
}

/* The mailbox (flags, then two slots of tp parts of cap bytes) and the control block (P2pCtl, then the
** call counter and the arrival counter), all zero. Plans without the kernel give 0. */
int gpu_p2p_alloc(Gpu *x, size_t cap, uint64_t *mbox, char *err, size_t len)
{
	*mbox = 0;
	if (x->tp > P2P_MAXRANK || x->cu.mod_fn(&x->p2p, x->mod, KERNEL_P2P_ALLREDUCE) != CUDA_SUCCESS) {
		x->p2p = NULL;
		return 0;
	}
	size_t mb = P2P_FLAGS_BYTES + 2 * (size_t)x->tp * cap;
	CK(x->cu.alloc(&x->p2p_mbox, mb), "cuMemAlloc (P2P mailbox)");
	CK(x->cu.alloc(&x->p2p_ctl, 256), "cuMemAlloc (P2P control)");
	CK(x->cu.memset8(x->p2p_mbox, 0, mb), "cuMemsetD8");
	CK(x->cu.memset8(x->p2p_ctl, 0, 256), "cuMemsetD8");
	x->p2p_cap = cap;
	*mbox = (uint64_t)x->p2p_mbox;
	return 1;
}

int gpu_p2p_start(Gpu *x, const uint64_t *mbox, size_t max_bytes, char *err, size_t len)
{
	P2pCtl c = {.seq = (uint64_t)x->p2p_ctl + 128, .arrive = (uint64_t)x->p2p_ctl + 132, .rank = x->rank, .tp = x->tp,
	            .cap = (int64_t)x->p2p_cap};
	for (int q = 0; q < x->tp; q++)
		c.mbox[q] = mbox[q];
	CK(x->cu.htod(x->p2p_ctl, &c, sizeof c), "cuMemcpyHtoD (P2P control)");
	x->p2p_max = max_bytes < x->p2p_cap ? max_bytes : x->p2p_cap;
	/* the persistent kernel: now the collectives may be its tasks, the step one launch */
	return x->pfn && persist_p2p_ok(x) ? persist_tables(x, 1, err, len) : 0;
}

int gpu_bind_thread(Gpu *x, char *err, size_t len)
{
	CK(x->cu.ctx_set(x->ctx), "cuCtxSetCurrent");
	return 0;
}

/*
** ---- The persistent decode kernel (issue 47; ops/persist.cuh, emit_cuda.c emit_cuda_persist) ----
**
** A plan compiled with glmc --decode persistent holds a task schedule for the 1-token step (Cuda.sched) and
** the program of one kernel, glm_persist, whose workers run it. gpu_open compiles that program with NVRTC,
** checks that the GPU keeps all its workers resident at once (the schedule's freedom from deadlock needs
** it: runtime/core/sched.c), and uploads what the kernel reads: the tasks (a share launch's tasks turned
** into block ranges of its grid at this S), each worker's first task, the waits, the launch table for T = 1
** (persist.cuh's GlmPLaunch), every launch's argument record (the values launch_step passes, laid out as
** cuLaunchKernel lays them out), the counters and the step control block. A 1-token decode step then
** captures the one launch instead of the launch list. Anything the GPU cannot hold falls back to the
** kernels with one line saying why. Tensor parallelism: the tables are first made for one launch a segment
** between the collectives (on the stream); once the ranks have started the one-shot P2P exchange and it
** carries every collective of the step, gpu_p2p_start makes them again for one launch with the collectives
** as tasks inside it (runtime/core/sched.c).
*/

/* The host image of persist.cuh's GlmPLaunch (64 bytes) and GlmPTask (24, SchedTask's layout). */
typedef struct {
	int64_t arg;
	uint64_t pre;
	int64_t pre_step;
	uint32_t grid[3], block, ntask;
	int32_t wait_lo, wait_hi;
	uint32_t lanes, own, pool;
} PLaunch;
_Static_assert(sizeof(PLaunch) == 64 && sizeof(SchedTask) == 24, "persist.cuh's GlmPLaunch and GlmPTask");
#define PERSIST_COLL_RECORD 32 /* kernels.cuh GlmPColl: destination, source, bytes, the P2P control block */

/* The fallback: the kernels run the step; why, on stderr once (rank 0's: the ranks' GPUs are alike) and in
** --stats. Always 0. */
static int persist_skip(Gpu *x, const char *why)
{
	if (x->rank == 0)
		fprintf(stderr, "glmrun: the persistent decode kernel is not used: %s; the decode step runs the plan's "
		        "kernels\n", why);
	snprintf(x->stats.decode_path, sizeof x->stats.decode_path, "kernels (persistent not used: %.100s)", why);
	if (x->pmod)
		x->cu.mod_unload(x->pmod), x->pmod = NULL;
	x->pfn = NULL;
	return 0;
}

/* Bytes of launch l's argument record, each argument at its natural alignment; off[k] its offsets. */
static size_t persist_record(const Launch *l, size_t *off)
{
	size_t at = 0;
	for (int k = 0; k < l->narg; k++) {
		int kd = l->arg[k].kind;
		size_t sz = kd == KA_INT || kd == KA_RANK || kd == KA_PDL || kd == KA_FLOAT ? 4 : 8;
		at = (at + sz - 1) / sz * sz;
		off[k] = at;
		at += sz;
	}
	return (at + 15) / 16 * 16;
}

/* Compile and load glm_persist and check that the GPU holds sc's workers: 1 usable, 0 not (persist_skip
** said why), -1 an error. *dsm gets the launch's dynamic shared memory; lane[3i ..] launch i's lanes and
** their bytes (persist.cuh GlmPLaunch): its own dynamic shared memory, and its wrapper's static shared
** memory (the arrays that become views of the pool) with room for each array's alignment. */
static int persist_module(Gpu *x, const Sched *sc, unsigned *dsm, uint32_t *lane, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	char why[256], arch[16];
	int sms = 0, optin = 0, stat = 0, fit = 0, smsm = 0;
	CK(x->cu.dev_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, x->dev), "cuDeviceGetAttribute (SMs)");
	if (sms < sc->sms) {
		snprintf(why, sizeof why, "its schedule wants %d SMs, this GPU has %d", sc->sms, sms);
		return persist_skip(x, why);
	}
	snprintf(arch, sizeof arch, "sm_%d%d", x->stats.cc_major, x->stats.cc_minor);
	/* the plan's cubin when glmc built it for this GPU, else NVRTC now (as module_open does for the kernels) */
	unsigned char *cubin = NULL;
	size_t n = 0;
	if ((!c->pcubin || strcmp(c->arch, arch)) && nvrtc_compile(c->psource, arch, &cubin, &n, err, len)) {
		char tmp[512];
		snprintf(tmp, sizeof tmp, "%s", err);
		return seterr(err, len, "the persistent decode kernel (Cuda.psource) for %s: %s", arch, tmp);
	}
	x->stats.recompiled |= cubin ? 2 : 0;
	CUresult r = x->cu.mod_load(&x->pmod, cubin ? cubin : c->pcubin);
	free(cubin);
	if (r != CUDA_SUCCESS)
		return cuerr(x, r, "cuModuleLoadData (the persistent decode kernel)", err, len);
	CK(x->cu.mod_fn(&x->pfn, x->pmod, "glm_persist"), "cuModuleGetFunction (glm_persist)");
	CK(x->cu.dev_attr(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, x->dev), "cuDeviceGetAttribute");
	CK(x->cu.fn_attr(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, x->pfn), "cuFuncGetAttribute (glm_persist)");
	CK(x->cu.dev_attr(&smsm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, x->dev),
	   "cuDeviceGetAttribute (shared memory an SM)");
	/* lanes within what a worker may have beside its static shared memory (1 KiB an SM reserved a block) */
	int64_t budget = (int64_t)smsm / sc->per_sm - 1024 - stat, need = 0;
	budget = budget < optin - stat ? budget : optin - stat;
	for (int i = 0; i < c->nl; i++) {
		int b = 0;
		lane[3 * i] = 1, lane[3 * i + 1] = lane[3 * i + 2] = 0;
		if (!sc->ntask[i] || !x->fn[i])
			continue;
		CK(x->cu.fn_attr(&b, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, x->fn[i]), "cuFuncGetAttribute (shared memory)");
		int64_t own, pool;
		sched_lane_bytes(c->l[i].smem, b, &own, &pool);
		int k = sched_lanes_ok(x->g, i) ? sched_lanes(sc->block, c->l[i].block, own + pool, budget) : 1;
		/* one lane: its arrays bounded only by the kernel's dynamic shared memory (pool 0, persist.cuh) */
		lane[3 * i] = (uint32_t)k, lane[3 * i + 1] = (uint32_t)own, lane[3 * i + 2] = k > 1 ? (uint32_t)pool : 0;
		need = k * (own + pool) > need ? k * (own + pool) : need;
	}
	*dsm = (unsigned)need;
	if ((long)*dsm + stat > optin) {
		snprintf(why, sizeof why, "a worker needs %ld bytes of shared memory, a block may have %d", (long)*dsm + stat,
		         optin);
		return persist_skip(x, why);
	}
	if (*dsm)
		CK(x->cu.fn_set(x->pfn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)*dsm),
		   "cuFuncSetAttribute (glm_persist's dynamic shared memory)");
	if (!x->cu.occupancy)
		return persist_skip(x, "the driver lacks cuOccupancyMaxActiveBlocksPerMultiprocessor");
	CK(x->cu.occupancy(&fit, x->pfn, sc->block, *dsm), "cuOccupancyMaxActiveBlocksPerMultiprocessor (glm_persist)");
	if (fit < sc->per_sm) {
		snprintf(why, sizeof why, "an SM holds %d of its %d-thread workers with %u bytes of dynamic shared memory, "
		         "the schedule wants %d", fit, sc->block, *dsm, sc->per_sm);
		return persist_skip(x, why);
	}
	return 1;
}

/* Set up the persistent 1-token decode step when the plan has one and o->decode allows it (see above). */
static int persist_open(Gpu *x, const GpuOpts *o, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	const Sched *sc = sched_for(c, 1);
	snprintf(x->stats.decode_path, sizeof x->stats.decode_path, "kernels");
	if (o->decode == GPU_DECODE_KERNELS) {
		snprintf(x->stats.decode_path, sizeof x->stats.decode_path, "kernels (--decode kernels)");
		return 0;
	}
	if (!sc || !c->psource) {
		if (o->decode == GPU_DECODE_PERSISTENT)
			return seterr(err, len, "--decode persistent: the plan has no persistent decode schedule for 1-token "
			              "steps (compile it with glmc compile --decode persistent)");
		return 0;
	}
	if (sc->nl != c->nl || sc->nworker != sc->sms * sc->per_sm || sc->nworker < 1 || sc->block < 32 ||
	    sc->block > 1024 || sc->first[sc->nworker] != sc->ntask_all)
		return seterr(err, len, "plan: the persistent schedule for T = 1 does not match the plan's %d launches", c->nl);
	unsigned dsm = 0;
	uint32_t *lane = malloc(sizeof(uint32_t) * 3 * ((size_t)c->nl + 1));
	if (!lane)
		return seterr(err, len, "out of memory");
	int ok = persist_module(x, sc, &dsm, lane, err, len);
	if (ok <= 0)
		return free(lane), ok;
	x->plane = lane, x->pdsm = dsm;
	/* the control block's L2 prefetch bytes (persist.cuh GlmPCtl.pre_max) */
	int64_t pre = o->l2_prefetch == 0 ? 128 * (int64_t)sc->block : o->l2_prefetch < 0 ? 0 : o->l2_prefetch;
	x->ppre = (uint32_t)(pre < UINT32_MAX ? pre : UINT32_MAX);
	return persist_tables(x, 0, err, len);
}

/* Whether the one-shot P2P exchange, once started, carries every collective of the 1-token step as the
** persistent kernel's tasks (runtime/core/sched.c): an allreduce the next launch does itself, or one with
** tasks whose message fits the mailbox. */
static int persist_p2p_ok(const Gpu *x)
{
	const Cuda *c = &x->g->cuda;
	const Sched *sc = sched_for(c, 1);
	for (int i = 0; i < c->nl; i++) {
		const Launch *l = &c->l[i];
		if (l->kind == LK_KERNEL || l->tmin > 1 || l->tmax < 1)
			continue;
		/* a task's message: within the mailbox (ranks.c sizes it for them), not only GLMRUN_P2P_MAX */
		if (l->inside_next ? !p2p_fused_next(x, i, 1)
		                   : !sc->ntask[i] || !p2p_fits(x, coll_to(x, l, 1), x->ptr[l->arg[1].s.node],
		                                                (size_t)sched_coll_bytes(x->g, i, 1), x->p2p_cap))
			return 0;
	}
	return 1;
}

/*
** The persistent kernel's tables on the GPU (replacing any before). one: the whole step is one launch, the
** collectives P2P tasks inside it (persist_p2p_ok); else one launch a segment, the collectives on the stream
** between them and their tasks empty.
*/
static int persist_tables(Gpu *x, int one, char *err, size_t len)
{
	const Cuda *c = &x->g->cuda;
	const Sched *sc = sched_for(c, 1);
	const uint32_t *lane = x->plane;
	if (x->pmem)
		x->cu.free(x->pmem), x->pmem = 0;
	free(x->pcoll), free(x->psegtasks);
	x->pcoll = x->psegtasks = NULL, x->plaunches = 0, x->pcolls = 0;
	/* the segments: the kernel's launches between the collectives (runtime/core/sched.c), and per segment k
	** and worker w, cut[k·nworker + w]: w's first task in segment k or later (its lists are in launch order) */
	int *seg = calloc((size_t)c->nl + 1, sizeof(int)), nseg = one ? 1 : sched_segments(x->g, 1, seg);
	int *cut = malloc(sizeof(int) * (size_t)(nseg + 1) * (size_t)sc->nworker);
	x->pcoll = calloc((size_t)nseg, sizeof(int)), x->psegtasks = calloc((size_t)nseg, sizeof(int));
	if (!seg || !cut || !x->pcoll || !x->psegtasks)
		return free(seg), free(cut), seterr(err, len, "out of memory");
	for (int i = 0; i < c->nl; i++)
		if (c->l[i].kind != LK_KERNEL && c->l[i].tmin <= 1 && c->l[i].tmax >= 1) {
			x->pcolls++;
			if (!one)
				x->pcoll[seg[i] - 1] = i;
		}
	for (int w = 0; w < sc->nworker; w++)
		for (int k = 0, t = sc->first[w]; k <= nseg; k++) {
			while (k < nseg && t < sc->first[w + 1] && seg[sc->task[t].launch] < k)
				t++;
			cut[(size_t)k * (size_t)sc->nworker + (size_t)w] = k == nseg ? sc->first[w + 1] : t;
		}
	for (int t = 0; t < sc->ntask_all; t++)
		x->psegtasks[seg[sc->task[t].launch]]++;
	x->pnseg = nseg;
	for (int k = 0; k < nseg; k++)
		x->plaunches += x->psegtasks[k] || k == nseg - 1; /* persist_launch's rule */
	x->stats.kernels_per_step = x->plaunches + 1; /* and the sampler */
	free(seg);
	/* the image: tasks, cut, wait, launch table, counters (zero), control (zero), argument records */
	size_t nw = (size_t)sc->wait_off[c->nl], a_task = 0, a_first = (sizeof(SchedTask) * (size_t)sc->ntask_all + 255) & ~(size_t)255,
	       a_wait = a_first + ((4 * (size_t)(nseg + 1) * (size_t)sc->nworker + 255) & ~(size_t)255),
	       a_lt = a_wait + ((4 * nw + 4 + 255) & ~(size_t)255),
	       a_count = a_lt + ((sizeof(PLaunch) * (size_t)c->nl + 255) & ~(size_t)255),
	       a_ctl = a_count + ((4 * (size_t)c->nl + 255) & ~(size_t)255), a_args = a_ctl + 256, total = a_args;
	size_t *off = malloc(sizeof(size_t) * MAXKARG);
	if (!off)
		return free(cut), seterr(err, len, "out of memory");
	for (int i = 0; i < c->nl; i++)
		if (sc->ntask[i])
			total += c->l[i].kind == LK_KERNEL ? persist_record(&c->l[i], off) : PERSIST_COLL_RECORD;
	unsigned char *img = calloc(1, total);
	if (!img)
		return free(off), free(cut), seterr(err, len, "out of memory");
	SchedTask *tk = (SchedTask *)(img + a_task);
	PLaunch *lt = (PLaunch *)(img + a_lt);
	int64_t *blocks = calloc((size_t)c->nl + 1, sizeof *blocks);
	int rc = blocks ? 0 : seterr(err, len, "out of memory");
	memcpy(img + a_first, cut, 4 * (size_t)(nseg + 1) * (size_t)sc->nworker);
	free(cut);
	memcpy(img + a_wait, sc->wait, 4 * nw);
	/* the control block (persist.cuh GlmPCtl: epoch, done, pre_max): zero but for the L2 prefetch's bytes */
	memcpy(img + a_ctl + 8, &x->ppre, 4);
	size_t at = a_args;
	for (int i = 0; i < c->nl && !rc; i++) {
		const Launch *l = &c->l[i];
		if (!sc->ntask[i])
			continue;
		PLaunch *p = &lt[i];
		p->ntask = (uint32_t)sc->ntask[i], p->wait_lo = sc->wait_off[i], p->wait_hi = sc->wait_off[i + 1];
		p->arg = (int64_t)(at - a_args);
		if (l->kind != LK_KERNEL && l->tmin <= 1 && l->tmax >= 1) {
			/* a collective's P2P blocks (kernels.cuh GlmPColl), on all the worker's threads; a segmented step's
			** collective runs on the stream instead and its tasks below are emptied */
			int64_t bytes = sched_coll_bytes(x->g, i, 1);
			CUdeviceptr rec[4] = {coll_to(x, l, 1), x->ptr[l->arg[1].s.node], (CUdeviceptr)bytes, one ? x->p2p_ctl : 0};
			p->grid[0] = (uint32_t)sched_coll_blocks(bytes), p->grid[1] = p->grid[2] = 1;
			p->block = (uint32_t)sc->block, p->lanes = 1;
			blocks[i] = p->grid[0];
			memcpy(img + at, rec, sizeof rec);
			at += PERSIST_COLL_RECORD;
			continue;
		}
		if (l->kind != LK_KERNEL || l->tmin > 1 || l->tmax < 1 || x->gemm[i]) {
			rc = seterr(err, len, "plan: launch %d (%s) in the persistent schedule is not a 1-token decode kernel", i,
			            launch_name(l));
			break;
		}
		for (int k = 0; k < 3; k++)
			p->grid[k] = (uint32_t)size_val(x, l->grid[k], 1);
		blocks[i] = (int64_t)p->grid[0] * p->grid[1] * p->grid[2];
		p->block = (uint32_t)l->block;
		p->lanes = lane[3 * i], p->own = lane[3 * i + 1], p->pool = lane[3 * i + 2];
		for (int k = 0; k < l->narg && !p->pre; k++)
			if (l->arg[k].kind == KA_BUF && x->g->node[l->arg[k].s.node].kind == VK_WEIGHT && blocks[i]) {
				p->pre = (uint64_t)x->ptr[l->arg[k].s.node];
				p->pre_step = (int64_t)(gpu_weight_bytes(x, l->arg[k].s.node) / (size_t)blocks[i]);
			}
		ArgV v[MAXKARG];
		arg_values(x, l, 1, 0, one ? x->p2p_ctl : 0, v);
		size_t rb = persist_record(l, off);
		for (int k = 0; k < l->narg; k++) {
			int kd = l->arg[k].kind;
			memcpy(img + at + off[k], &v[k], kd == KA_INT || kd == KA_RANK || kd == KA_PDL || kd == KA_FLOAT ? 4 : 8);
		}
		at += rb;
	}
	for (int t = 0; t < sc->ntask_all && !rc; t++) {
		SchedTask s = sc->task[t];
		int64_t B = s.launch >= 0 && s.launch < c->nl ? blocks[s.launch] : -1, k = B < 0 ? 0 : sc->ntask[s.launch];
		if (B >= 0 && sc->share[s.launch])
			s.blo = (int32_t)(B * s.blo / k), s.bhi = (int32_t)(B * s.bhi / k);
		if (B < 0 || s.blo < 0 || s.blo > s.bhi || s.bhi > B) {
			rc = seterr(err, len, "plan: persistent task %d (launch %d, blocks %d..%d) outside its launch's %lld blocks",
			            t, s.launch, s.blo, s.bhi, (long long)B);
			break;
		}
		if (!one && c->l[s.launch].kind != LK_KERNEL)
			s.blo = s.bhi = 0; /* run on the stream between the segments: the task only counts itself */
		tk[t] = s;
	}
	if (!rc) {
		CUresult r = x->cu.alloc(&x->pmem, total);
		if (r == CUDA_SUCCESS)
			r = x->cu.htod(x->pmem, img, total);
		if (r != CUDA_SUCCESS)
			rc = cuerr(x, r, "cuMemAlloc / cuMemcpyHtoD (the persistent kernel's tables)", err, len);
	}
	unsigned most = 1; /* the most lanes a launch runs, for --stats */
	for (int i = 0; i < c->nl; i++)
		most = sc->ntask[i] && lane[3 * i] > most ? lane[3 * i] : most;
	free(img), free(off), free(blocks);
	if (rc)
		return -1;
	x->ptask = x->pmem + a_task, x->pcut = x->pmem + a_first, x->pwait = x->pmem + a_wait, x->plt = x->pmem + a_lt;
	x->pcount = x->pmem + a_count, x->pctl = x->pmem + a_ctl, x->pargs = x->pmem + a_args;
	x->pworkers = (unsigned)sc->nworker, x->pblock = (unsigned)sc->block;
	char segs[80] = "";
	if (nseg > 1)
		snprintf(segs, sizeof segs, "; %d launches a step around %d collectives", nseg, nseg - 1);
	else if (x->pcolls)
		snprintf(segs, sizeof segs, "; %d collectives as P2P tasks inside it", x->pcolls);
	snprintf(x->stats.decode_path, sizeof x->stats.decode_path,
	         "persistent (%d workers: %d SMs x %d, %d threads, up to %u lanes, %u bytes of dynamic shared memory, %d "
	         "tasks, L2 prefetch %u bytes a task%s)", sc->nworker, sc->sms, sc->per_sm, sc->block, most, x->pdsm,
	         sc->ntask_all, x->ppre, segs);
	return 0;
}

/* The 1-token decode step through the persistent kernel (eager or captured): one launch, or with collectives
** (tp > 1) one a segment with each collective after its segment (an empty segment's launch skipped, the
** last always run: it closes the step); trace: 0, or where its workers record the task timeline (persist.cuh). */
static int persist_launch(Gpu *x, CUdeviceptr trace, char *err, size_t len)
{
	for (int k = 0; k < x->pnseg; k++) {
		CUdeviceptr lo = x->pcut + 4 * (CUdeviceptr)k * x->pworkers, hi = lo + 4 * (CUdeviceptr)x->pworkers;
		int close = k == x->pnseg - 1;
		void *args[] = {&x->ptask, &lo, &hi, &x->plt, &x->pwait, &x->pcount, &x->pctl, &x->pargs, &trace, &close};
		if (x->psegtasks[k] || close)
			CK(x->cu.launch(x->pfn, x->pworkers, 1, 1, x->pblock, 1, 1, x->pdsm, x->st, args, NULL),
			   "launching the persistent decode kernel (glm_persist)");
		if (!close && coll_launch(x, &x->g->cuda.l[x->pcoll[k]], 1, err, len))
			return -1;
	}
	if (x->pnseg == 1)
		x->stats.p2p_calls += x->pcolls; /* its tasks */
	return 0;
}

/* --profile on the persistent path: `steps` 1-token steps run eagerly (never captured, so the graph's kernel
** keeps its null trace), each with a trace buffer, read back into x->ptrace for gpu_persist_trace. The steps
** continue the sequence as gpu_profile's do. */
static int persist_trace(Gpu *x, int steps, char *err, size_t len)
{
	const Sched *sc = sched_for(&x->g->cuda, 1);
	if (!sc || steps < 1)
		return 0;
	size_t per = 4 * (size_t)sc->ntask_all;
	uint64_t *h = calloc((size_t)steps * per, sizeof *h);
	if (!h)
		return seterr(err, len, "out of memory");
	CUdeviceptr d = 0;
	CUresult r = x->cu.alloc(&d, per * 8);
	int rc = r == CUDA_SUCCESS ? 0 : cuerr(x, r, "cuMemAlloc (the persistent trace)", err, len);
	for (int s = 0; s < steps && !rc; s++) {
		if ((r = x->cu.memset8(d, 0, per * 8)) != CUDA_SUCCESS)
			rc = cuerr(x, r, "cuMemsetD8 (the persistent trace)", err, len);
		else if (!(rc = persist_launch(x, d, err, len)) && !(rc = launch_sample(x, 0, 1, err, len))) {
			if ((r = x->cu.stream_sync(x->st)) != CUDA_SUCCESS || (r = x->cu.dtoh(h + s * per, d, per * 8)) != CUDA_SUCCESS)
				rc = cuerr(x, r, "the persistent trace step", err, len);
		}
	}
	if (d)
		x->cu.free(d);
	if (rc)
		return free(h), -1;
	x->ptrace = h, x->ptrace_steps = steps;
	return 0;
}

const uint64_t *gpu_persist_trace(const Gpu *x, int *steps)
{
	*steps = x->ptrace ? x->ptrace_steps : 0;
	return x->ptrace;
}
