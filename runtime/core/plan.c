/*
** runtime/core/plan.c — write and read plan files. The plan is the whole contract between glmc and glmrun:
** a magic, a format version, a crc32 of the payload and its length, then the metadata, the nodes, the
** weight manifest and the outputs. The reader trusts nothing: every count and string is checked against
** the bytes left, the checksum must match, and the graph is re-verified before anyone runs it.
*/
#include "glm.h"
#include "quant.h"
#include "rfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
	unsigned char *p;
	size_t n, cap;
	int oom;
} Buf;

static void put(Buf *b, const void *src, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 65536;
		while (cap < b->n + n)
			cap *= 2;
		unsigned char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p, b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void put_u8(Buf *b, int v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }
static void put_u32(Buf *b, uint32_t v) { put(b, &v, 4); }
static void put_i64(Buf *b, int64_t v) { put(b, &v, 8); }
static void put_f64(Buf *b, double v) { put(b, &v, 8); }

static void put_str(Buf *b, const char *s)
{
	if (!s) {
		put_u32(b, UINT32_MAX);
		return;
	}
	uint32_t n = (uint32_t)strlen(s);
	put_u32(b, n);
	put(b, s, n);
}

static void put_size(Buf *b, Size s)
{
	put_u32(b, (uint32_t)s.node), put_u8(b, s.lo), put_u8(b, s.hi), put_i64(b, s.div);
}

/* Which weights the GPU keeps as quantized blocks: one byte per weight, the ggml type id + 1 (0 for the
** float conversion). */
static void put_cuda_wq(Buf *b, const Cuda *c, int nw)
{
	for (int i = 0; i < nw; i++)
		put_u8(b, c->wq ? c->wq[i] + 1 : 0);
}

/* A persistent decode schedule (glm.h Sched): its shape, the per-launch tables, then the tasks. */
static void put_sched(Buf *b, const Sched *s)
{
	put_u32(b, (uint32_t)s->T), put_u32(b, (uint32_t)s->sms), put_u32(b, (uint32_t)s->per_sm);
	put_u32(b, (uint32_t)s->block), put_u32(b, (uint32_t)s->nl), put_u32(b, (uint32_t)s->ntask_all);
	for (int i = 0; i < s->nl; i++)
		put_u32(b, (uint32_t)s->ntask[i]), put_u8(b, (uint8_t)s->share[i]);
	for (int i = 0; i <= s->nl; i++)
		put_u32(b, (uint32_t)s->wait_off[i]);
	for (int k = 0; k < s->wait_off[s->nl]; k++)
		put_u32(b, (uint32_t)s->wait[k]);
	for (int w = 0; w <= s->nworker; w++)
		put_u32(b, (uint32_t)s->first[w]);
	for (int k = 0; k < s->ntask_all; k++)
		put_u32(b, (uint32_t)s->task[k].launch), put_u32(b, (uint32_t)s->task[k].blo),
		put_u32(b, (uint32_t)s->task[k].bhi), put_i64(b, s->task[k].bytes);
}

/* The CUDA section: present (flag 1) once emit_cuda has run. */
static void put_cuda(Buf *b, const Cuda *c, int nw)
{
	put_u8(b, c->source != NULL);
	if (!c->source)
		return;
	put_str(b, c->arch), put_u8(b, c->act), put_u8(b, c->wconv + 1), put_str(b, c->source);
	put_i64(b, (int64_t)c->cubin_size);
	put(b, c->cubin, c->cubin_size);
	put_str(b, c->sample_kernel);
	put_u32(b, (uint32_t)c->nl);
	for (int i = 0; i < c->nl; i++) {
		const Launch *l = &c->l[i];
		put_u32(b, (uint32_t)l->node), put_u8(b, l->kind), put_str(b, l->kernel), put_u8(b, l->inside_next);
		put_u32(b, (uint32_t)l->tmin), put_u32(b, (uint32_t)l->tmax);
		put_u8(b, l->flags);
		for (int k = 0; k < 3; k++)
			put_size(b, l->grid[k]);
		put_u32(b, (uint32_t)l->block), put_u32(b, (uint32_t)l->smem), put_u8(b, l->narg);
		for (int k = 0; k < l->narg; k++)
			put_u8(b, l->arg[k].kind), put_size(b, l->arg[k].s), put_size(b, l->arg[k].s2), put_f64(b, l->arg[k].f);
	}
	put_cuda_wq(b, c, nw);
	put_u32(b, (uint32_t)c->nsched);
	for (int i = 0; i < c->nsched; i++)
		put_sched(b, &c->sched[i]);
	put_u8(b, c->psource != NULL);
	if (c->psource) {
		put_str(b, c->psource);
		put_i64(b, (int64_t)c->pcubin_size);
		put(b, c->pcubin, c->pcubin_size);
	}
}

/* All of buf written to fd (write may stop short). */
static int write_all(int fd, const unsigned char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w, n -= (size_t)w;
	}
	return 0;
}

/*
** Write head + body as the file at path without ever leaving a partial plan there: a temporary file in
** the same directory (so the rename stays on one file system) is written, flushed to disk and renamed
** over the target. A full disk or any write error leaves the previous file as it was and no temporary.
*/
static int write_atomic(const char *path, const void *head, size_t nh, const void *body, size_t nb, char *err,
                        size_t len)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
		return seterr(err, len, "%s: path too long", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return seterr(err, len, "%s: cannot create the temporary plan file %s: %m", path, tmp);
	int ok = !write_all(fd, head, nh) && !write_all(fd, body, nb) && !fsync(fd);
	int e = errno;
	ok = !close(fd) && ok;
	if (!ok || rename(tmp, path)) {
		e = ok ? errno : e;
		unlink(tmp);
		errno = e;
		return seterr(err, len, "%s: write failed (the previous file, if any, is unchanged): %m", path);
	}
	/* the rename itself made durable; a directory that cannot be synced is not an error */
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else
		slash[slash == dir] = 0; /* "/x" keeps "/" */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

int plan_write(const Graph *g, const char *path, char *err, size_t len)
{
	Buf b = {0};
	put_u32(&b, (uint32_t)g->nmeta);
	for (int i = 0; i < g->nmeta; i++)
		put_str(&b, g->meta[i].key), put_str(&b, g->meta[i].val);
	put_u32(&b, (uint32_t)g->nfusion);
	for (int i = 0; i < g->nfusion; i++)
		put_str(&b, g->fusion[i]);
	put_u32(&b, (uint32_t)g->n);
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		put_u8(&b, n->op), put_u8(&b, n->dtype), put_u8(&b, n->kind), put_u8(&b, n->ndim);
		for (int k = 0; k < n->ndim; k++)
			put_i64(&b, n->dim[k]);
		put_u8(&b, n->nin);
		for (int k = 0; k < n->nin; k++)
			put_u32(&b, (uint32_t)n->in[k]);
		for (int k = 0; k < MAXATTR; k++)
			put_i64(&b, n->ia[k]);
		for (int k = 0; k < MAXATTR; k++)
			put_f64(&b, n->fa[k]);
		put_str(&b, n->name);
		put_u8(&b, n->shard.kind), put_u8(&b, n->shard.axis);
		put_str(&b, n->src);
		put_u32(&b, (uint32_t)n->line), put_u32(&b, (uint32_t)n->layer);
		put_u8(&b, n->mem_region), put_i64(&b, n->mem_off);
		put_u32(&b, (uint32_t)n->fused_into), put_u8(&b, n->fuse_pattern);
	}
	put_u32(&b, (uint32_t)g->nw);
	for (int i = 0; i < g->nw; i++) {
		const WeightRef *w = &g->w[i];
		put_u32(&b, (uint32_t)w->node), put_str(&b, w->source), put_str(&b, w->file);
		put_u8(&b, w->dtype), put_u32(&b, (uint32_t)w->qtype), put_i64(&b, (int64_t)w->offset);
		put_i64(&b, (int64_t)w->nbytes), put_i64(&b, w->row0), put_u32(&b, (uint32_t)w->unpermute), put_u8(&b, w->slot_rows);
		put_i64(&b, w->rstride), put_i64(&b, w->roff), put_u32(&b, (uint32_t)w->parts);
		put_u32(&b, (uint32_t)w->split);
	}
	put_u32(&b, (uint32_t)g->nout);
	for (int i = 0; i < g->nout; i++)
		put_str(&b, g->out_name[i]), put_u32(&b, (uint32_t)g->out[i]);
	put_u8(&b, g->mem.planned);
	put_i64(&b, g->mem.token_bytes), put_i64(&b, g->mem.static_bytes);
	put_i64(&b, g->mem.token_lower), put_i64(&b, g->mem.static_lower);
	put_cuda(&b, &g->cuda, g->nw);
	if (b.oom) {
		free(b.p);
		return seterr(err, len, "%s: out of memory while writing the plan", path);
	}
	unsigned char hdr[24];
	memcpy(hdr, PLAN_MAGIC, 8);
	uint32_t ver = PLAN_VERSION, crc = (uint32_t)crc32_z(0L, b.p, b.n);
	uint64_t n = b.n;
	memcpy(hdr + 8, &ver, 4), memcpy(hdr + 12, &crc, 4), memcpy(hdr + 16, &n, 8);
	int rc = write_atomic(path, hdr, 24, b.p, b.n, err, len);
	free(b.p);
	return rc;
}

/* A bounds-checked reader; the first failure sticks and later reads return zeros. */
typedef struct {
	const unsigned char *p;
	size_t n, at;
	const char *fail;
	Arena *A;
} Rd;

static int get(Rd *r, void *dst, size_t n)
{
	if (r->fail || r->n - r->at < n) {
		if (!r->fail)
			r->fail = "truncated payload";
		memset(dst, 0, n);
		return -1;
	}
	memcpy(dst, r->p + r->at, n);
	r->at += n;
	return 0;
}

static int get_u8(Rd *r) { unsigned char c; get(r, &c, 1); return c; }
static uint32_t get_u32(Rd *r) { uint32_t v; get(r, &v, 4); return v; }
static int64_t get_i64(Rd *r) { int64_t v; get(r, &v, 8); return v; }
static double get_f64(Rd *r) { double v; get(r, &v, 8); return v; }

static const char *get_str(Rd *r)
{
	uint32_t n = get_u32(r);
	if (n == UINT32_MAX || r->fail)
		return NULL;
	if (r->n - r->at < n) {
		r->fail = "string runs past the end";
		return NULL;
	}
	char *s = arena_alloc(r->A, (size_t)n + 1);
	memcpy(s, r->p + r->at, n);
	r->at += n;
	if (memchr(s, 0, n))
		r->fail = "string holds a NUL byte";
	return s;
}

/* A count that must fit in what is left, each item taking at least `min` bytes. */
static uint32_t get_count(Rd *r, size_t min, uint32_t limit)
{
	uint32_t n = get_u32(r);
	if (!r->fail && (n > limit || (size_t)n * min > r->n - r->at)) {
		r->fail = "count larger than the file";
		return 0;
	}
	return n;
}

/* A Size must name a node (or none) and a dim range of it; `check` is off for arguments that only use
** the node field (buffers). */
static Size get_size(const Graph *g, Rd *r, int check)
{
	Size s;
	s.node = (int32_t)get_u32(r), s.lo = (int8_t)get_u8(r), s.hi = (int8_t)get_u8(r), s.div = get_i64(r);
	if (!r->fail && (s.node < -1 || s.node >= g->n))
		r->fail = "kernel launch names a node outside the graph";
	else if (!r->fail && check &&
	         (s.div < 0 || (s.node >= 0 && (s.div == 0 || s.lo < 0 || s.hi < s.lo || s.hi > g->node[s.node].ndim))))
		r->fail = "bad size expression in a kernel launch";
	return s;
}

/* The per-weight device types (put_cuda_wq): a block type glmrun has kernels for, on a DT_Q weight. */
static void get_cuda_wq(Graph *g, Rd *r)
{
	g->cuda.wq = arena_alloc(r->A, sizeof(int) * (size_t)(g->nw ? g->nw : 1));
	for (int i = 0; i < g->nw && !r->fail; i++) {
		int q = get_u8(r) - 1;
		if (!r->fail && q >= 0 && (g->w[i].dtype != DT_Q || g->w[i].qtype != q || !quant_gpu_block(q)))
			r->fail = "bad quantized-weight entry in the CUDA section";
		g->cuda.wq[i] = q;
	}
}

/* A launch's kind against its name and its node: a kernel has a name, a collective none and the op of its
** node; only an allreduce may be done inside the next kernel (launch_p2p_bad checks the next one). NULL when
** consistent, else what is wrong. */
static const char *launch_bad(const Graph *g, const Launch *l)
{
	if (l->kind < LK_KERNEL || l->kind >= LK_NKINDS || (l->kind == LK_KERNEL) != (l->kernel != NULL))
		return "kernel launch with a bad kind, or a name that does not match its kind";
	if (l->node < 0 || l->node >= g->n)
		return "bad kernel launch";
	int op = g->node[l->node].op;
	if ((l->kind == LK_ALLREDUCE && op != OP_ALLREDUCE) || (l->kind == LK_ALLGATHER && op != OP_ALLGATHER))
		return "collective launch on a node of another op";
	if (l->inside_next != 0 && (l->inside_next != 1 || l->kind != LK_ALLREDUCE))
		return "bad inside-the-next-kernel mark";
	return NULL;
}

/* An allreduce marked inside_next must be followed by a launch that takes KA_P2P (glmrun's skip relies on
** it). NULL when so, else what is wrong. */
static const char *launch_p2p_bad(const Cuda *c, int i)
{
	if (!c->l[i].inside_next)
		return NULL;
	if (i + 1 >= c->nl)
		return "allreduce marked to run inside the next kernel, and no launch follows";
	for (int k = 0; k < c->l[i + 1].narg; k++)
		if (c->l[i + 1].arg[k].kind == KA_P2P)
			return NULL;
	return "allreduce marked to run inside the next kernel, which takes no KA_P2P argument";
}

/* A schedule's tables, sized from the file only within what is left of it (sched_check then proves the
** contents, in plan_read, as for a plan from glmc). */
static void get_sched(const Graph *g, Rd *r, Sched *s)
{
	s->T = (int)get_u32(r), s->sms = (int)get_u32(r), s->per_sm = (int)get_u32(r), s->block = (int)get_u32(r);
	s->nl = (int)get_u32(r);
	s->ntask_all = (int)get_count(r, 20, 1u << 26);
	if (!r->fail && (s->nl != g->cuda.nl || s->T < 1 || s->sms < 1 || s->sms > 1024 || s->per_sm < 1 ||
	                 s->per_sm > 32 || s->block < 1 || s->block > 1024)) {
		r->fail = "bad persistent schedule header";
		return;
	}
	if (r->fail)
		return;
	s->nworker = s->sms * s->per_sm;
	if ((uint64_t)s->nl * 9 + (uint64_t)s->nworker * 4 > r->n - r->at) {
		r->fail = "persistent schedule larger than the file";
		return;
	}
	s->ntask = arena_alloc(r->A, sizeof(int32_t) * ((size_t)s->nl + 1));
	s->share = arena_alloc(r->A, (size_t)s->nl + 1);
	s->wait_off = arena_alloc(r->A, sizeof(int32_t) * ((size_t)s->nl + 1));
	for (int i = 0; i < s->nl; i++)
		s->ntask[i] = (int32_t)get_u32(r), s->share[i] = (int8_t)get_u8(r);
	for (int i = 0; i <= s->nl; i++)
		s->wait_off[i] = (int32_t)get_u32(r);
	uint32_t nwait = s->wait_off[s->nl];
	if (r->fail || s->wait_off[0] != 0 || s->wait_off[s->nl] < 0 || (uint64_t)nwait * 4 > r->n - r->at) {
		r->fail = r->fail ? r->fail : "bad persistent schedule wait list";
		return;
	}
	s->wait = arena_alloc(r->A, sizeof(int32_t) * ((size_t)nwait + 1));
	for (uint32_t k = 0; k < nwait; k++)
		s->wait[k] = (int32_t)get_u32(r);
	s->first = arena_alloc(r->A, sizeof(int32_t) * ((size_t)s->nworker + 1));
	for (int w = 0; w <= s->nworker; w++)
		s->first[w] = (int32_t)get_u32(r);
	s->task = arena_alloc(r->A, sizeof(SchedTask) * ((size_t)s->ntask_all + 1));
	for (int k = 0; k < s->ntask_all; k++) {
		SchedTask *t = &s->task[k];
		t->launch = (int32_t)get_u32(r), t->blo = (int32_t)get_u32(r), t->bhi = (int32_t)get_u32(r);
		t->bytes = get_i64(r);
	}
}

static void get_cuda(Graph *g, Rd *r)
{
	Cuda *c = &g->cuda;
	if (!get_u8(r) || r->fail)
		return;
	c->arch = get_str(r), c->act = get_u8(r), c->wconv = get_u8(r) - 1, c->source = get_str(r);
	int64_t n = get_i64(r);
	if (r->fail || !c->arch || !c->source || (c->act != DT_F32 && c->act != DT_BF16) || c->wconv >= DT_NTYPES ||
	    n < 0 || (uint64_t)n > r->n - r->at) {
		r->fail = r->fail ? r->fail : "bad CUDA section header";
		return;
	}
	if (n) {
		unsigned char *cb = arena_alloc(r->A, (size_t)n);
		get(r, cb, (size_t)n);
		c->cubin = cb, c->cubin_size = (size_t)n;
	}
	c->sample_kernel = get_str(r);
	uint32_t nl = get_count(r, 40, 1u << 24);
	if (r->fail || !c->sample_kernel) {
		r->fail = r->fail ? r->fail : "missing sampler kernel";
		return;
	}
	c->l = arena_alloc(r->A, sizeof(Launch) * (nl ? nl : 1));
	for (uint32_t i = 0; i < nl && !r->fail; i++) {
		Launch *l = &c->l[i];
		l->node = (int)get_u32(r), l->kind = (int8_t)get_u8(r), l->kernel = get_str(r), l->inside_next = (int8_t)get_u8(r);
		l->tmin = (int)get_u32(r), l->tmax = (int)get_u32(r);
		l->flags = get_u8(r);
		for (int k = 0; k < 3; k++)
			l->grid[k] = get_size(g, r, 1);
		l->block = (int)get_u32(r), l->smem = (int)get_u32(r), l->narg = get_u8(r);
		if (!r->fail && (r->fail = launch_bad(g, l)))
			break;
		if (!r->fail && (l->block < 1 || l->block > 1024 ||
		                 l->smem < 0 || l->smem > (1 << 20) ||
		                 l->narg > MAXKARG || l->tmin < 1 || l->tmax < l->tmin || (l->flags & ~LAUNCH_FLAGS_ALL))) {
			r->fail = "bad kernel launch";
			break;
		}
		for (int k = 0; k < l->narg && !r->fail; k++) {
			KArg *a = &l->arg[k];
			a->kind = (int8_t)get_u8(r);
			int region = a->kind == KA_SCRATCH || a->kind == KA_ZERO;
			int sized = a->kind == KA_INT || a->kind == KA_LONG || region;
			a->s = get_size(g, r, sized);
			a->s2 = get_size(g, r, region);
			a->f = get_f64(r);
			if (!r->fail && (a->kind > KA_P2P || ((a->kind == KA_BUF || a->kind == KA_ROPE) && a->s.node < 0) ||
			                 (region && !(a->f >= 1 && a->f <= 64))))
				r->fail = "bad kernel argument";
		}
		c->nl = (int)i + 1;
	}
	for (int i = 0; i < c->nl && !r->fail; i++)
		r->fail = launch_p2p_bad(c, i);
	get_cuda_wq(g, r);
	uint32_t ns = get_count(r, 24, 64);
	c->sched = arena_alloc(r->A, sizeof(Sched) * (ns ? ns : 1));
	for (uint32_t i = 0; i < ns && !r->fail; i++, c->nsched = (int)i)
		get_sched(g, r, &c->sched[i]);
	if (get_u8(r) && !r->fail) { /* the persistent kernel's program (emit_cuda_persist), with the schedules */
		c->psource = get_str(r);
		int64_t n = get_i64(r);
		if (!r->fail && (!c->psource || !c->nsched))
			r->fail = "persistent kernel program without a schedule";
		else if (!r->fail && (n < 0 || (uint64_t)n > r->n - r->at))
			r->fail = "bad persistent kernel header";
		else if (!r->fail && n) {
			unsigned char *cb = arena_alloc(r->A, (size_t)n);
			get(r, cb, (size_t)n);
			c->pcubin = cb, c->pcubin_size = (size_t)n;
		}
	}
}

/*
** What glmc's front end (lua_front.c l_param) guarantees of a weight binding, checked again on a plan,
** which may be forged with a valid checksum: the loaders index source rows with these fields (a row
** stride on a weight that is not [blocks, rows, cols] reads out of bounds) and format `source` with
** the part number. NULL when the entry is consistent, else what is wrong.
*/
static const char *weight_ref_bad(const Graph *g, const WeightRef *w)
{
	const Node *n = &g->node[w->node];
	if (n->op != OP_PARAM || n->kind != VK_WEIGHT)
		return "weight manifest entry on a node that is not a parameter";
	if (w->rstride && (n->ndim != 3 || n->dim[1] < 1 || w->roff + n->dim[1] > w->rstride || w->slot_rows ||
	                   w->row0 || w->unpermute || w->parts))
		return "weight row stride on a parameter that is not [blocks, rows, cols] or with another row option";
	if (!w->rstride && w->roff)
		return "weight row offset without a row stride";
	if ((w->slot_rows != 0 && w->slot_rows != 1) || (w->row0 && !w->slot_rows))
		return "bad weight row slot";
	if (w->split >= n->ndim)
		return "weight split axis outside the parameter's rank";
	const char *pc = strchr(w->source, '%');
	if (w->parts && (w->parts != n->dim[0] || !pc || strncmp(pc, "%d", 2) || strchr(pc + 2, '%') || w->row0 ||
	                 w->slot_rows || w->unpermute))
		return "stacked weight whose part count or source name pattern is not what glmc writes";
	return NULL;
}

static int read_payload(Graph *g, Rd *r)
{
	uint32_t nm = get_count(r, 8, 1u << 20);
	for (uint32_t i = 0; i < nm && !r->fail; i++) {
		const char *k = get_str(r), *v = get_str(r);
		if (!k || !v) {
			r->fail = r->fail ? r->fail : "null metadata string";
			break;
		}
		graph_set_meta(g, k, v);
	}
	uint32_t nf = get_count(r, 4, 1u << 20);
	for (uint32_t i = 0; i < nf && !r->fail; i++) {
		const char *f = get_str(r);
		if (!f) {
			r->fail = r->fail ? r->fail : "null fusion reason";
			break;
		}
		graph_add_fusion(g, f);
	}
	uint32_t nn = get_count(r, 16, 1u << 26);
	for (uint32_t i = 0; i < nn && !r->fail; i++) {
		Node n = {0};
		n.op = get_u8(r), n.dtype = get_u8(r), n.kind = get_u8(r), n.ndim = get_u8(r);
		if (n.op >= OP_NOPS || n.ndim > MAXDIM || n.ndim < 1) {
			r->fail = "node with an unknown op or a bad rank";
			break;
		}
		for (int k = 0; k < n.ndim; k++)
			n.dim[k] = get_i64(r);
		n.nin = get_u8(r);
		if (n.nin > MAXIN) {
			r->fail = "node with too many operands";
			break;
		}
		for (int k = 0; k < n.nin; k++) {
			n.in[k] = (int)get_u32(r);
			if (n.in[k] < 0 || (uint32_t)n.in[k] >= i) {
				r->fail = "operand that is not an earlier node";
				break;
			}
		}
		for (int k = 0; k < MAXATTR; k++)
			n.ia[k] = get_i64(r);
		for (int k = 0; k < MAXATTR; k++)
			n.fa[k] = get_f64(r);
		n.name = get_str(r);
		n.shard.kind = (int8_t)get_u8(r), n.shard.axis = (int8_t)get_u8(r);
		n.src = get_str(r);
		n.line = (int)get_u32(r), n.layer = (int)get_u32(r);
		n.mem_region = (int8_t)get_u8(r), n.mem_off = get_i64(r);
		n.fused_into = (int)get_u32(r), n.fuse_pattern = (int8_t)get_u8(r);
		if (!r->fail && (n.fused_into < -1 || n.fused_into >= (int)nn || n.fuse_pattern < 0 ||
		                 n.fuse_pattern >= FUSE_NPATTERNS)) {
			r->fail = "bad fusion mark";
			break;
		}
		if (!r->fail)
			graph_add(g, &n);
	}
	uint32_t nw = get_count(r, 74, (uint32_t)g->n);
	if (!r->fail && nw) {
		g->w = arena_alloc(g->A, sizeof(WeightRef) * nw);
		g->wcap = (int)nw;
	}
	for (uint32_t i = 0; i < nw && !r->fail; i++) {
		WeightRef *w = &g->w[g->nw];
		w->node = (int)get_u32(r), w->source = get_str(r), w->file = get_str(r);
		w->dtype = get_u8(r), w->qtype = (int)get_u32(r), w->offset = (uint64_t)get_i64(r);
		w->nbytes = (uint64_t)get_i64(r), w->row0 = get_i64(r), w->unpermute = (int)get_u32(r);
		w->slot_rows = get_u8(r), w->rstride = get_i64(r), w->roff = get_i64(r), w->parts = (int)get_u32(r);
		w->split = (int)get_u32(r);
		if (!r->fail && (w->node < 0 || w->node >= g->n || !w->source || !w->file || w->dtype >= DT_NTYPES ||
		                 w->qtype < 0 || w->row0 < 0 || w->unpermute < 0 || w->rstride < 0 || w->roff < 0 ||
		                 w->parts < 0 || w->split < -1 || w->split >= MAXDIM)) {
			r->fail = "bad weight manifest entry";
			break;
		}
		if (!r->fail && (r->fail = weight_ref_bad(g, w)))
			break;
		g->nw++;
	}
	uint32_t no = get_count(r, 8, 8);
	for (uint32_t i = 0; i < no && !r->fail; i++) {
		g->out_name[i] = get_str(r);
		g->out[i] = (int)get_u32(r);
		if (!g->out_name[i] || g->out[i] < 0 || g->out[i] >= g->n)
			r->fail = r->fail ? r->fail : "bad output entry";
		g->nout = (int)i + 1;
	}
	g->mem.planned = get_u8(r);
	g->mem.token_bytes = get_i64(r), g->mem.static_bytes = get_i64(r);
	g->mem.token_lower = get_i64(r), g->mem.static_lower = get_i64(r);
	if (!r->fail)
		get_cuda(g, r);
	if (!r->fail && r->at != r->n)
		r->fail = "trailing bytes after the payload";
	return r->fail ? -1 : 0;
}

int plan_read(Graph *g, const char *path, char *err, size_t len)
{
	int fd = rfile_open(path); /* a FIFO or device is refused at once, not read */
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f) {
		char m[512];
		rfile_err(path, m, sizeof m);
		if (fd >= 0)
			close(fd);
		return seterr(err, len, "cannot open the plan: %s", m);
	}
	unsigned char hdr[24];
	size_t got = fread(hdr, 1, 24, f);
	if (got < 8 || memcmp(hdr, PLAN_MAGIC, 8)) {
		fclose(f);
		return seterr(err, len, "%s: not a glmc plan (bad magic)", path);
	}
	if (got < 24) {
		fclose(f);
		return seterr(err, len, "%s: truncated plan header", path);
	}
	uint32_t ver, crc;
	uint64_t n;
	memcpy(&ver, hdr + 8, 4), memcpy(&crc, hdr + 12, 4), memcpy(&n, hdr + 16, 8);
	if (ver != PLAN_VERSION) {
		fclose(f);
		return seterr(err, len, "%s: plan format version %u, but this glmrun reads version %u; recompile the "
		              "model with the matching glmc", path, ver, PLAN_VERSION);
	}
	if (fseek(f, 0, SEEK_END) || ftell(f) < 0) {
		fclose(f);
		return seterr(err, len, "%s: cannot size the plan: %m", path);
	}
	uint64_t have = (uint64_t)ftell(f) - 24;
	if (have != n) {
		fclose(f);
		return seterr(err, len, "%s: the header promises %llu payload bytes but the file has %llu (truncated or "
		              "appended to)", path, (unsigned long long)n, (unsigned long long)have);
	}
	unsigned char *p = malloc(n ? n : 1);
	if (!p) {
		fclose(f);
		return seterr(err, len, "%s: out of memory reading %llu bytes", path, (unsigned long long)n);
	}
	fseek(f, 24, SEEK_SET);
	size_t rd = fread(p, 1, n, f);
	fclose(f);
	if (rd != n) {
		free(p);
		return seterr(err, len, "%s: read failed", path);
	}
	if ((uint32_t)crc32_z(0L, p, n) != crc) {
		free(p);
		return seterr(err, len, "%s: checksum mismatch: the plan is corrupted", path);
	}
	Rd r = {.p = p, .n = n, .A = g->A};
	int rc = read_payload(g, &r);
	free(p);
	if (rc)
		return seterr(err, len, "%s: malformed plan: %s at byte %zu", path, r.fail, r.at + 24);
	char m[512];
	if (verify(g, m, sizeof m))
		return seterr(err, len, "%s: invalid plan: %s", path, m);
	if (g->mem.planned && memplan_check(g, m, sizeof m))
		return seterr(err, len, "%s: invalid memory plan: %s", path, m);
	for (int i = 0; i < g->cuda.nsched; i++)
		if (sched_check(g, &g->cuda.sched[i], m, sizeof m))
			return seterr(err, len, "%s: invalid persistent schedule: %s", path, m);
	return 0;
}
