# glmc — build bin/glmc, bin/glmrun, the test programs; `make test` runs the CPU suite.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Icompiler -Iops -Iruntime -I/usr/include/lua5.4 -I/usr/local/cuda/include
# Lua and jansson are linked statically so the binaries run on machines without the -dev packages
# (the GPU machine); glmc never links the CUDA driver.
LIBDIR  := /usr/lib/x86_64-linux-gnu
STATIC  := $(LIBDIR)/liblua5.4.a $(LIBDIR)/libjansson.a $(LIBDIR)/libpcre2-8.a $(LIBDIR)/libz.a
LDLIBS  := $(STATIC) -lm -ldl -lpthread

MAINS   := compiler/main.c runtime/main.c
LIBSRC  := $(filter-out $(MAINS),$(wildcard compiler/*.c ops/*.c runtime/*.c))
LIBOBJ  := $(LIBSRC:%.c=build/%.o) build/gen/kernels_cuh.o
HDRS    := $(wildcard compiler/*.h ops/*.h runtime/*.h)
TESTS   := $(patsubst tests/%.c,build/tests/%,$(wildcard tests/test_*.c))
TOOLS   := $(patsubst tests/tools/%.c,build/tools/%,$(wildcard tests/tools/*.c))

all: bin/glmc bin/glmrun $(TESTS) $(TOOLS)

build/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ops/kernels.cuh, ops/fused.cuh and ops/quant.cuh travel inside the binaries as one string (glm_kernels_cuh).
build/embed: compiler/tools/embed.c
	@mkdir -p build
	$(CC) -O2 -Wall -Wextra -Werror $< -o $@

build/gen/kernels_cuh.c: ops/kernels.cuh ops/fused.cuh ops/quant.cuh build/embed
	@mkdir -p build/gen
	cat ops/kernels.cuh ops/fused.cuh ops/quant.cuh | build/embed glm_kernels_cuh > $@

build/libglm.a: $(LIBOBJ)
	@rm -f $@
	ar rcs $@ $^

bin/glmc: build/compiler/main.o build/libglm.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

bin/glmrun: build/runtime/main.o build/libglm.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

build/tests/%: tests/%.c build/libglm.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< build/libglm.a $(LDLIBS) -o $@

build/tools/%: tests/tools/%.c build/libglm.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< build/libglm.a $(LDLIBS) -o $@

test: all
	@tests/run.sh

demo: all
	@tests/demo.sh

# Everything tests/gpu/run.sh needs on the device machine (carry bin and build there).
gpu-bundle: all build/bench/gemv
	tests/gpu/build_kernels_test.sh
	mkdir -p build/gpu && nvcc -std=c++17 -O2 -arch=sm_90 -Icompiler -Iops -Iruntime tests/gpu/test_qgemv.cu build/libglm.a $(LDLIBS) -o build/gpu/test_qgemv
	mkdir -p build/fixtures
	cp -r ../shared/fixtures/hf/* ../shared/fixtures/vocab/ggml-vocab-gpt-2.gguf build/fixtures/

# The decode GEMV micro-benchmark (bench/gemv.sh runs it on the GPU machine with its PyTorch peer).
bench-gemv: build/bench/gemv
build/bench/gemv: bench/gemv.cu ops/kernels.cuh ops/fused.cuh ops/quant.cuh
	@mkdir -p build/bench
	nvcc -std=c++17 -O2 -arch=sm_90 bench/gemv.cu -o $@

clean:
	rm -rf build bin

.PHONY: all test demo clean gpu-bundle bench-gemv
