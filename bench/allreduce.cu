/*
** bench/allreduce.cu — allreduce latency inside a CUDA graph at decode sizes (2 KiB to 256 KiB of f32),
** set up the way glmrun runs: one thread per GPU, each with its own stream, NCCL communicator (from one
** unique id) and graph. Compares NCCL (with the environment's NCCL_PROTO: run it once plain and once
** with NCCL_PROTO=LL) against glmc's one-shot P2P kernel (ops/kernels.cuh k_p2p_allreduce, the same
** code glmrun's plans carry), next to the NVLink bandwidth floor of a one-shot exchange.
**
** usage: build/bench/allreduce [--ranks N] [--calls K] [--reps R]
**   N GPUs (default: all visible); each graph holds K allreduces (default 64) and is replayed R times
**   (default 20) after 3 warm-up replays; a size's time is the slowest rank's, per call.
** Before timing, each method's result is checked against the host's sum of fresh random inputs (NCCL
** within 1e-6 relative L2, P2P exactly: it sums in rank order). Exits 1 on a wrong result.
*/
#include "../ops/kernels.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "libnccl.h"

#define CK(call)                                                                                            \
	do {                                                                                                    \
		cudaError_t e_ = (call);                                                                            \
		if (e_ != cudaSuccess) {                                                                            \
			fprintf(stderr, "allreduce: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                                        \
		}                                                                                                   \
	} while (0)

#define NK(call)                                                                                            \
	do {                                                                                                    \
		ncclResult_t r_ = (call);                                                                           \
		if (r_ != ncclSuccess) {                                                                            \
			char e_[512];                                                                                   \
			nccl_err(&B.nc, r_, #call, e_, sizeof e_);                                                      \
			fprintf(stderr, "allreduce: %s\n", e_);                                                         \
			exit(1);                                                                                        \
		}                                                                                                   \
	} while (0)

__global__ void __launch_bounds__(512) g_p2p(float *y, const float *x, long long n, const P2pCtl *c)
{
	k_p2p_allreduce<float>(y, x, n, c);
}

static const long long MAXB = 256 << 10;

/* Shared between the rank threads. */
static struct {
	Nccl nc;
	ncclUniqueId id;
	int n, calls, reps, peer_all;
	pthread_barrier_t bar;
	char *mbox[P2P_MAXRANK];
	double us[P2P_MAXRANK];      /* this method and size's time per call on each rank */
	int bad;
} B;

static unsigned long long rng_state(int rank, int salt)
{
	return 0x9e3779b97f4a7c15ull * (unsigned long long)(rank + 1) + 0x632be59bd9b4e019ull * (unsigned long long)salt;
}

/* Fresh random values in [-1, 1) for this rank and salt; the host recomputes them for the check. */
static void fill(std::vector<float> &v, int rank, int salt)
{
	unsigned long long s = rng_state(rank, salt);
	for (auto &x : v) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		x = (float)((s >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
	}
}

/* Time one graph of `calls` launches of op on this rank; every rank replays together. */
template <typename F> static double time_graph(cudaStream_t st, F op)
{
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	for (int k = 0; k < B.calls; k++)
		op();
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	pthread_barrier_wait(&B.bar);
	for (int i = 0; i < 3; i++)
		CK(cudaGraphLaunch(ge, st));
	CK(cudaStreamSynchronize(st));
	pthread_barrier_wait(&B.bar);
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventRecord(a, st));
	for (int i = 0; i < B.reps; i++)
		CK(cudaGraphLaunch(ge, st));
	CK(cudaEventRecord(b, st));
	CK(cudaStreamSynchronize(st));
	float ms;
	CK(cudaEventElapsedTime(&ms, a, b));
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	return 1e3 * ms / (B.reps * (double)B.calls);
}

/* Whether got is the sum over ranks of the salted inputs: exactly in rank order (P2P), or within tol. */
static int check_sum(const std::vector<float> &got, int salt, double tol)
{
	std::vector<float> want(got.size(), 0.0f), x(got.size());
	for (int r = 0; r < B.n; r++) {
		fill(x, r, salt);
		for (size_t i = 0; i < x.size(); i++)
			want[i] += x[i];
	}
	double num = 0, den = 0;
	for (size_t i = 0; i < got.size(); i++) {
		if (tol == 0 && memcmp(&got[i], &want[i], 4))
			return 0;
		double d = (double)got[i] - want[i];
		num += d * d, den += (double)want[i] * want[i];
	}
	return !(sqrt(num / den) > tol);
}

static void *rank_main(void *arg)
{
	int r = (int)(long)arg;
	CK(cudaSetDevice(r));
	for (int q = 0; q < B.n; q++) {
		int can = 0;
		if (q == r)
			continue;
		CK(cudaDeviceCanAccessPeer(&can, r, q));
		if (!can) {
			B.peer_all = 0;
			continue;
		}
		cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
		if (e == cudaErrorPeerAccessAlreadyEnabled)
			cudaGetLastError();
		else
			CK(e);
	}
	ncclComm_t comm;
	NK(B.nc.init_rank(&comm, B.n, B.id, r));
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	float *x, *y;
	CK(cudaMalloc(&x, MAXB));
	CK(cudaMalloc(&y, MAXB));
	size_t mb = P2P_FLAGS_BYTES + 2 * (size_t)B.n * MAXB;
	unsigned *counters;
	P2pCtl *ctl;
	CK(cudaMalloc(&B.mbox[r], mb));
	CK(cudaMemset(B.mbox[r], 0, mb));
	CK(cudaMalloc(&counters, 8));
	CK(cudaMemset(counters, 0, 8));
	CK(cudaMalloc(&ctl, sizeof(P2pCtl)));
	pthread_barrier_wait(&B.bar);
	P2pCtl c = {};
	for (int q = 0; q < B.n; q++)
		c.mbox[q] = B.mbox[q];
	c.seq = counters, c.arrive = counters + 1, c.rank = r, c.tp = B.n, c.cap = MAXB;
	CK(cudaMemcpy(ctl, &c, sizeof c, cudaMemcpyHostToDevice));
	int p2p = B.n <= P2P_MAXRANK && B.peer_all;
	for (long long bytes = 2048; bytes <= MAXB; bytes *= 2) {
		long long n = bytes / 4, nv = bytes / 16;
		unsigned nb = (unsigned)(nv + 511) / 512;
		nb = nb > P2P_NBMAX ? P2P_NBMAX : nb < 1 ? 1 : nb;
		std::vector<float> h((size_t)n);
		for (int m = 0; m < 2; m++) {
			if (m == 1 && !p2p) {
				if (r == 0)
					printf("  %9s  %9.2f\n", "-", (double)bytes * (B.n - 1) / 450e9 * 1e6);
				continue;
			}
			int salt = (int)(bytes * 2 + m);
			fill(h, r, salt);
			CK(cudaMemcpy(x, h.data(), (size_t)bytes, cudaMemcpyHostToDevice));
			CK(cudaMemset(y, 0xff, (size_t)bytes));
			if (m == 0)
				NK(B.nc.allreduce(x, y, (size_t)n, ncclFloat32, ncclSum, comm, st));
			else
				g_p2p<<<nb, 512, 0, st>>>(y, x, n, ctl);
			CK(cudaGetLastError());
			CK(cudaStreamSynchronize(st));
			CK(cudaMemcpy(h.data(), y, (size_t)bytes, cudaMemcpyDeviceToHost));
			if (!check_sum(h, salt, m == 0 ? 1e-6 : 0)) {
				fprintf(stderr, "allreduce: rank %d: %s gave a wrong sum at %lld bytes\n", r, m ? "P2P" : "NCCL", bytes);
				B.bad = 1;
			}
			if (m == 0)
				B.us[r] = time_graph(st, [&] { NK(B.nc.allreduce(x, y, (size_t)n, ncclFloat32, ncclSum, comm, st)); });
			else
				B.us[r] = time_graph(st, [&] { g_p2p<<<nb, 512, 0, st>>>(y, x, n, ctl); });
			pthread_barrier_wait(&B.bar);
			if (r == 0) {
				double worst = 0;
				for (int q = 0; q < B.n; q++)
					worst = B.us[q] > worst ? B.us[q] : worst;
				if (m == 0)
					printf("%8lld  %9.2f", bytes, worst);
				else {
					/* One-shot: each GPU sends (n-1) copies of the message over NVLink, ~450 GB/s each way. */
					double floor_us = (double)bytes * (B.n - 1) / 450e9 * 1e6;
					printf("  %9.2f  %9.2f\n", worst, floor_us);
				}
				fflush(stdout);
			}
			pthread_barrier_wait(&B.bar);
		}
	}
	NK(B.nc.destroy(comm));
	return NULL;
}

int main(int argc, char **argv)
{
	/* NVLink multicast must never be used on these machines (and glmc never needs it). */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	int visible;
	CK(cudaGetDeviceCount(&visible));
	B.n = visible, B.calls = 64, B.reps = 20, B.peer_all = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "--ranks"))
			B.n = v;
		else if (!strcmp(argv[i], "--calls"))
			B.calls = v;
		else if (!strcmp(argv[i], "--reps"))
			B.reps = v;
		else {
			fprintf(stderr, "usage: allreduce [--ranks N] [--calls K] [--reps R]\n");
			return 2;
		}
	}
	if (B.n < 1 || B.n > visible || B.n > P2P_MAXRANK || B.calls < 1 || B.reps < 1) {
		fprintf(stderr, "allreduce: --ranks must be 1..%d (visible GPUs, at most %d), --calls and --reps positive\n",
		        visible < P2P_MAXRANK ? visible : P2P_MAXRANK, P2P_MAXRANK);
		return 2;
	}
	char err[1024];
	if (nccl_open(&B.nc, err, sizeof err)) {
		fprintf(stderr, "allreduce: %s\n", err);
		return 1;
	}
	NK(B.nc.get_id(&B.id));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	const char *proto = getenv("NCCL_PROTO");
	printf("allreduce of f32 inside a CUDA graph: %d rank%s (%s), NCCL %d.%d.%d, NCCL_PROTO=%s, %d calls per graph, %d "
	       "replays\n", B.n, B.n > 1 ? "s" : "", prop.name, B.nc.version / 10000, B.nc.version / 100 % 100,
	       B.nc.version % 100, proto ? proto : "(default)", B.calls, B.reps);
	printf("%8s  %9s  %9s  %9s\n", "bytes", "nccl_us", "p2p_us", "floor_us");
	pthread_barrier_init(&B.bar, NULL, (unsigned)B.n);
	std::vector<pthread_t> th((size_t)B.n);
	for (long r = 0; r < B.n; r++)
		if (pthread_create(&th[(size_t)r], NULL, rank_main, (void *)r)) {
			fprintf(stderr, "allreduce: cannot start thread %ld\n", r);
			return 1;
		}
	for (int r = 0; r < B.n; r++)
		pthread_join(th[(size_t)r], NULL);
	if (!B.peer_all)
		printf("p2p: not run (no peer access between some GPUs)\n");
	printf("check: %s\n", B.bad ? "WRONG RESULTS (see above)" : "every result right (NCCL within 1e-6, P2P exact)");
	return B.bad;
}
