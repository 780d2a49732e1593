/*
** tests/test_ranks.c — what of the multi-GPU layer runs without a GPU: the refusal of a plan that wants
** more GPUs than are visible (one line, both numbers), the stall test hook's parsing, and NCCL's
** loader (found: a usable version and a unique id; not found, or a bad GLMRUN_NCCL: a message that
** names what was tried).
*/
#include "check.h"
#include "libnccl.h"
#include "ranks.h"

#include <stdlib.h>
#include <string.h>

static int one_line(const char *s)
{
	return s[0] && !strchr(s, '\n');
}

int main(void)
{
	char err[2048];

	/* GPU count against the plan's tp. */
	int rc = ranks_check_gpus(2, 1, err, sizeof err);
	check(rc != 0 && strstr(err, "partitioned for 2 GPUs") && strstr(err, "but 1 GPU is visible") &&
	          strstr(err, "--tp 1 for this one") && one_line(err),
	      "tp 2 on one GPU is refused naming both numbers", "'%s'", err);
	rc = ranks_check_gpus(8, 4, err, sizeof err);
	check(rc != 0 && strstr(err, "partitioned for 8 GPUs") && strstr(err, "but 4 GPUs are visible") &&
	          strstr(err, "compile it with --tp 4 for this one") && one_line(err),
	      "tp 8 on four GPUs is refused naming both numbers", "'%s'", err);
	check(ranks_check_gpus(2, 2, err, sizeof err) == 0 && ranks_check_gpus(1, 8, err, sizeof err) == 0 &&
	          ranks_check_gpus(4, 8, err, sizeof err) == 0,
	      "tp up to the visible count is accepted (the first tp GPUs)", "refused: %s", err);

	/* The stall test hook. */
	RanksOpts ro;
	unsetenv("GLMRUN_TEST_STALL_RANK"), unsetenv("GLMRUN_TEST_STALL_STEP");
	unsetenv("GLMRUN_P2P_MAX");
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) == 0 && ro.stall_rank == -1 && ro.p2p_max == 262144,
	      "no stall without the hook; P2P allreduces up to 256 KiB by default", "rank %d p2p %ld", ro.stall_rank,
	      ro.p2p_max);
	setenv("GLMRUN_P2P_MAX", "0", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) == 0 && ro.p2p_max == 0, "GLMRUN_P2P_MAX=0 turns P2P off",
	      "p2p %ld", ro.p2p_max);
	setenv("GLMRUN_P2P_MAX", "-5", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) != 0 && strstr(err, "GLMRUN_P2P_MAX=-5") && one_line(err),
	      "a bad GLMRUN_P2P_MAX is refused", "'%s'", err);
	unsetenv("GLMRUN_P2P_MAX");
	setenv("GLMRUN_TEST_STALL_RANK", "1", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) == 0 && ro.stall_rank == 1 && ro.stall_step == 1,
	      "GLMRUN_TEST_STALL_RANK=1 stalls rank 1 before decode step 1", "rank %d step %d", ro.stall_rank, ro.stall_step);
	setenv("GLMRUN_TEST_STALL_STEP", "0", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) == 0 && ro.stall_step == 0,
	      "GLMRUN_TEST_STALL_STEP=0 stalls before the prefill", "step %d", ro.stall_step);
	setenv("GLMRUN_TEST_STALL_STEP", "x", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) != 0 && strstr(err, "GLMRUN_TEST_STALL_STEP=x") && one_line(err),
	      "a bad stall step is refused", "'%s'", err);
	unsetenv("GLMRUN_TEST_STALL_STEP");
	setenv("GLMRUN_TEST_STALL_RANK", "2", 1);
	check(ranks_opts_from_env(&ro, 2, err, sizeof err) != 0 && strstr(err, "not a rank of this plan (0..1)"),
	      "a stall rank outside the plan is refused", "'%s'", err);
	unsetenv("GLMRUN_TEST_STALL_RANK");

	/* NCCL's loader. */
	Nccl n;
	setenv("GLMRUN_NCCL", "/nonexistent/libnccl.so.2", 1);
	rc = nccl_open(&n, err, sizeof err);
	check(rc != 0 && strstr(err, "GLMRUN_NCCL=/nonexistent/libnccl.so.2 cannot be loaded") && one_line(err),
	      "a GLMRUN_NCCL that does not load is named", "'%s'", err);
	unsetenv("GLMRUN_NCCL");
	if (nccl_open(&n, err, sizeof err) == 0) {
		ncclUniqueId id;
		memset(&id, 0, sizeof id);
		ncclResult_t r = n.get_id(&id);
		int nonzero = 0;
		for (size_t i = 0; i < sizeof id.internal; i++)
			nonzero |= id.internal[i];
		check(n.version >= 20900 && n.path[0] && r == ncclSuccess && nonzero,
		      "NCCL found: version 2.9 or newer and a unique id", "version %d at '%s', ncclGetUniqueId %d", n.version,
		      n.path, (int)r);
		char e2[512];
		nccl_err(&n, ncclInvalidArgument, "ncclAllReduce", e2, sizeof e2);
		check(strstr(e2, "NCCL: ncclAllReduce failed:") && strstr(e2, "(error 4)") && one_line(e2),
		      "an NCCL failure is one line with NCCL's own words", "'%s'", e2);
		nccl_close(&n);
	} else
		check(strstr(err, "NCCL not found (libnccl.so.2; tried libnccl.so.2") && strstr(err, "GLMRUN_NCCL") &&
		          one_line(err),
		      "NCCL missing: the message names what was tried", "'%s'", err);
	return check_done();
}
