/*
** tests/tools/checkplan.c — check a plan's CUDA section without a GPU: the cubin is an ELF for the
** plan's arch, every launched kernel (and the sampler) is a function symbol in it, each launch's block
** equals the __launch_bounds__ its wrapper declares, and grid dims stay within the hardware limits for
** every step size from 1 to --max-t tokens. Collective launches (LK_ALLREDUCE / LK_ALLGATHER) are
** no kernels: each must name a collective node and carry destination, source and count. A launch glmrun
** may hand to cuBLASLt (cuda_prefill_gemm) must be exactly its linear: it writes that node's output and
** nothing else, and reads the linear's input and weight (so the memory plan's checker saw what cuBLASLt
** reads); the summary counts them. Every launched wrapper calls glm_pdl_wait() first, or runs a decode
** GEMV template, which calls it after asking L2 for its first weights (glmrun launches
** kernels programmatically dependent on the one before).
**
** usage: checkplan PLAN [--max-t N]   prints one summary line; exits 1 with the first problem.
*/
#include "glm.h"
#include "passes.h"
#include "gemv_shape.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "checkplan: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

/* Whether the ELF image has a function symbol called name. */
static int has_symbol(const unsigned char *img, size_t n, const char *name)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (n < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64)
		fail("the cubin is not a 64-bit ELF image");
	if (eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > n)
		fail("the cubin's section table is out of bounds");
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
			continue;
		const Elf64_Shdr *strs = &sh[sh[i].sh_link];
		if (sh[i].sh_offset + sh[i].sh_size > n || strs->sh_offset + strs->sh_size > n)
			fail("the cubin's symbol table is out of bounds");
		const Elf64_Sym *sym = (const Elf64_Sym *)(img + sh[i].sh_offset);
		for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++)
			if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_name < strs->sh_size &&
			    !strcmp((const char *)img + strs->sh_offset + sym[k].st_name, name))
				return 1;
	}
	return 0;
}

/* The __launch_bounds__ of kernel `name` in the generated source, or -1; its blocks-an-SM figure into
** *minb (0 when it has none). */
static int declared_bounds(const char *src, const char *name, int *minb)
{
	*minb = 0;
	char pat[128];
	snprintf(pat, sizeof pat, " %s(", name);
	const char *p = strstr(src, pat);
	if (!p)
		return -1;
	const char *lb = p;
	while (lb > src && lb[-1] != '\n')
		lb--;
	lb = strstr(lb, "__launch_bounds__(");
	if (!lb || lb > p)
		return -1;
	const char *comma = strchr(lb, ','), *close = strchr(lb, ')');
	if (comma && close && comma < close)
		*minb = atoi(comma + 1);
	return atoi(lb + 18);
}

/* The RB template argument of a one-token k_gemv_fused wrapper body (its 7th), or -1 for any other. */
static int gemv_fused_rb1(const char *body)
{
	if (strncmp(body, "{ k_gemv_fused<", 15))
		return -1;
	const char *p = body + 15;
	for (int i = 0; i < 6 && p; i++)
		p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
	const char *q = p ? strchr(p, ',') : NULL;
	return q && atoi(q + 1) == 1 ? atoi(p) : -1;
}

static int64_t eval(const Graph *g, Size s, int64_t T, int64_t S)
{
	if (s.node < 0)
		return s.div;
	int64_t p = 1;
	for (int i = s.lo; i < s.hi; i++) {
		int64_t d = g->node[s.node].dim[i];
		p *= d == DIM_T ? T : d == DIM_S ? S : d;
	}
	return (p + s.div - 1) / s.div;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		fail("usage: checkplan PLAN [--max-t N]");
	int64_t maxT = argc > 3 && !strcmp(argv[2], "--max-t") ? atoll(argv[3]) : 4096;
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	char err[1024];
	if (plan_read(&g, argv[1], err, sizeof err))
		fail("%s", err);
	const Cuda *c = &g.cuda;
	if (!c->source)
		fail("%s: no CUDA section", argv[1]);
	if (!c->cubin)
		fail("%s: no cubin (was NVRTC missing at compile time?)", argv[1]);
	if (!has_symbol(c->cubin, c->cubin_size, c->sample_kernel))
		fail("sampler %s missing from the cubin", c->sample_kernel);
	Target tg; /* the GPU the plan's shapes are for */
	if (!c->arch || target_for_arch(c->arch, &tg))
		fail("%s: unknown arch %s", argv[1], c->arch ? c->arch : "(none)");
	int distinct = 0, ncoll = 0, ngemm = 0, nfused = 0, nbound = 0;
	for (int i = 0; i < c->nl; i++) {
		const Launch *l = &c->l[i];
		if (l->kind != LK_KERNEL) {
			int op = g.node[l->node].op;
			int want = l->kind == LK_ALLREDUCE ? OP_ALLREDUCE : OP_ALLGATHER;
			if (op != want)
				fail("collective launch %s names %s node %%%d", launch_name(l), op_table[op].name, l->node);
			int fused = l->inside_next;
			if (fused) { /* the next launch may do this allreduce: it must take the control block */
				int p2p = 0;
				for (int k = 0; i + 1 < c->nl && k < c->l[i + 1].narg; k++)
					p2p |= c->l[i + 1].arg[k].kind == KA_P2P;
				if (!p2p)
					fail("allreduce of node %%%d is marked as done by the next launch, which takes no KA_P2P", l->node);
				nfused++;
			}
			if (l->narg != 3 || (l->arg[0].kind != KA_BUF && l->arg[0].kind != KA_SCRATCH) || l->arg[1].kind != KA_BUF ||
			    l->arg[2].kind != KA_LONG || (l->arg[0].kind == KA_BUF && l->arg[0].s.node != l->node) ||
			    l->arg[1].s.node != g.node[l->node].in[0])
				fail("collective launch %s of node %%%d has malformed arguments", launch_name(l), l->node);
			ncoll++;
			continue;
		}
		if (!has_symbol(c->cubin, c->cubin_size, l->kernel))
			fail("kernel %s (node %%%d) missing from the cubin", l->kernel, l->node);
		int minb, lb = declared_bounds(c->source, l->kernel, &minb);
		if (lb != l->block)
			fail("kernel %s launches %d threads but declares __launch_bounds__(%d)", l->kernel, l->block, lb);
		if (minb < 0 || minb * lb > 2048)
			fail("kernel %s declares %d blocks of %d threads an SM (at most 2048 threads)", l->kernel, minb, lb);
		/* glmrun may launch any kernel before the one before it has finished: its wrapper must wait first */
		char key[80];
		snprintf(key, sizeof key, " %s(", l->kernel);
		const char *w = strstr(c->source, key), *body = w ? strchr(w, '{') : NULL;
		/* a one-token float GEMV group: the register budget ops/gemv_shape.h picks for its grid */
		int rb = body ? gemv_fused_rb1(body) : -1;
		if (rb > 0 && l->tmax == 1) {
			int want = gemv_min_blocks1(l->block, rb, eval(&g, l->grid[0], 1, 1 << 17), tg.sms);
			if (minb != want)
				fail("kernel %s (rb %d, %d threads) declares %d blocks an SM, ops/gemv_shape.h says %d", l->kernel, rb,
				     l->block, minb, want);
			nbound += want > 0;
		}
		/* dynamic shared memory: the wrapper hands it to its template, and it fits an H200's block */
		const char *end = body ? strchr(body, '}') : NULL;
		int dsm = body && end && strstr(body, "glm_dsm") && strstr(body, "glm_dsm") < end;
		if ((l->smem > 0) != dsm || l->smem > 232448)
			fail("kernel %s asks for %d bytes of dynamic shared memory; its wrapper %s it", l->kernel, l->smem,
			     dsm ? "declares" : "does not declare");
		if (!body || (strncmp(body, "{ glm_pdl_wait(); ", 18) && strncmp(body, "{ k_linear_gemv<", 16) &&
		              strncmp(body, "{ k_gemv_fused<", 15)))
			fail("kernel %s (node %%%d) does not call glm_pdl_wait() before its template", l->kernel, l->node);
		if (cuda_prefill_gemm(&g, i)) {
			const Node *n = &g.node[l->node];
			int writes = 0, reads_x = 0, reads_w = 0;
			for (int k = 0; k < l->narg; k++) {
				if (l->arg[k].kind != KA_BUF)
					continue;
				int v = l->arg[k].s.node;
				if (l->arg[k].f == 1)
					writes += v == l->node ? 1 : 100;
				reads_x |= v == n->in[0], reads_w |= v == n->in[1];
			}
			if (writes != 1 || !reads_x || !reads_w)
				fail("launch %s of linear %%%d is taken for cuBLASLt but is not that linear alone (%s)", l->kernel,
				     l->node, writes != 1 ? "it writes other buffers" : "it does not read the linear's operands");
			ngemm++;
		}
		int first = 1;
		for (int k = 0; k < i && first; k++)
			first = c->l[k].kind != LK_KERNEL || strcmp(c->l[k].kernel, l->kernel) != 0;
		distinct += first;
		for (int64_t T = l->tmin; T <= maxT && T <= l->tmax; T = T < 64 ? T + 1 : T * 2) {
			int64_t gx = eval(&g, l->grid[0], T, 1 << 17), gy = eval(&g, l->grid[1], T, 1 << 17),
			        gz = eval(&g, l->grid[2], T, 1 << 17);
			if (gx < 1 || gx > INT32_MAX || gy < 1 || gy > 65535 || gz < 1 || gz > 65535)
				fail("kernel %s (node %%%d) at T=%lld has grid %lld x %lld x %lld, outside the limits", l->kernel,
				     l->node, (long long)T, (long long)gx, (long long)gy, (long long)gz);
		}
	}
	for (int i = 0; i < c->nl; i++)
		if (c->l[i].kind == LK_ALLREDUCE && !has_symbol(c->cubin, c->cubin_size, KERNEL_P2P_ALLREDUCE))
			fail("the plan has allreduces but no %s in the cubin", KERNEL_P2P_ALLREDUCE);
	printf("%s: %s, %d launches of %d distinct kernels, %d collectives (%d allreduces the next kernel may do), %d "
	       "prefill GEMMs for cuBLASLt, cubin %zu bytes, %d one-token GEMV launches with a register budget\n", argv[1],
	       c->arch, c->nl - ncoll, distinct, ncoll, nfused, ngemm, c->cubin_size, nbound);
	arena_free(&A);
	return 0;
}
