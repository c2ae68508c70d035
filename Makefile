# rap build. Plain GNU make: see docs/BUILD.md for why not CMake.
#
#   make run      install missing packages, build, run rap on built-in defaults
#   make test     check the include layers, install missing packages, build,
#                 run every test, then the README's examples that need no GPU
#                 (tests/readme_examples.sh)
#   make layers   only the include layer check (scripts/check_layers.sh)
#   make          build lib, rap, tests, benches (no package install)
#   make CUDA=0   CPU-only build: .cu files are compiled as C11 by gcc
#   make BUILD=dir  build somewhere else (several builds side by side)
#   make SAN=1    AddressSanitizer + UBSan build (use with BUILD=build-san)
#   make ISAL=0   gzip by zlib alone, even where ISA-L is installed
#   make fuzz-replay  every fuzzing entry point over its corpus and crash
#                 reproducers, gcc + ASan/UBSan (make test runs it; docs/FUZZ.md)
#   make fuzz FORMAT=x SECONDS=n  libFuzzer on one format (clang, installed
#                 by scripts/deps.sh clang for this target only)
#   make ARROW=0  without Apache Arrow's Parquet reader, even where pyarrow is
#                 installed (Parquet input is then refused, saying so)

BUILD ?= build
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),)
  CUDA := $(if $(NVCC),1,0)
endif

CC ?= gcc
WARN := -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation
# -ffp-contract=off: no fused multiply-add contraction, so that CPU and GPU
# compute bit-identical float results where docs/OPS.md asks for it.
CFLAGS := -std=c11 -O2 -g $(WARN) -ffp-contract=off -D_GNU_SOURCE -Iinclude -Isrc -pthread -MMD -MP \
  -I/usr/include/x86_64-linux-gnu/openblas-pthread
LDLIBS := -lopenblas -lglpk -lxgboost -lz -lm -lpthread
# MPI (src/dist/comm_mpi.c): built when mpicc reports OpenMPI's flags (or
# pkg-config knows ompi-c); MPI=0 leaves it out. Without it rap still builds
# and runs every rank in one process (threads, --gpus N).
MPI ?= 1
ifeq ($(MPI),1)
  MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
  MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
endif
ifneq ($(strip $(MPI_LIBS)),)
  CFLAGS += -DRAP_HAVE_MPI=1 $(MPI_CFLAGS)
  LDLIBS += $(MPI_LIBS)
endif
# ISA-L (src/data/inflate.c): igzip inflates gzip input 3-4x faster than
# zlib on one core (docs/BUILD.md). Used when its header is there; ISAL=0
# leaves it out and rap reads gzip with zlib alone.
ISAL ?= 1
ifeq ($(ISAL),1)
  ISAL_H := $(firstword $(wildcard /usr/include/isa-l/igzip_lib.h /usr/include/isa-l.h \
    /usr/local/include/isa-l/igzip_lib.h /usr/local/include/isa-l.h))
endif
ifneq ($(ISAL_H),)
  CFLAGS += -DRAP_HAVE_ISAL=1
  LDLIBS += -lisal
endif
ifeq ($(SAN),1)
  CFLAGS += -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined,float-cast-overflow
endif
# FUZZER=1 (make fuzz, clang): the library instrumented for libFuzzer's
# coverage, with ASan/UBSan; the entry point is linked with libFuzzer.
ifeq ($(FUZZER),1)
  CFLAGS += -fsanitize=fuzzer-no-link,address,undefined,float-cast-overflow -fno-omit-frame-pointer \
    -Wno-unknown-warning-option
  LDFLAGS += -fsanitize=address,undefined,float-cast-overflow
endif

# Parquet input (docs/BUILD.md): Apache Arrow's C++ Parquet reader, from the
# pyarrow wheel (its headers and libarrow/libparquet), behind parquet.h's C
# interface; src/data/parquet.cc is the one C++ file. Without pyarrow rap
# builds the same and refuses Parquet files saying what to install.
ARROW ?= 1
ifeq ($(ARROW),1)
  PYARROW := $(shell python3 -c 'import pyarrow; print(pyarrow.get_include(), pyarrow.get_library_dirs()[0])' 2>/dev/null)
endif
LIB_CC :=
ifneq ($(words $(PYARROW)),2)
  PYARROW :=
endif
ifneq ($(PYARROW),)
  ARROW_INC := $(word 1,$(PYARROW))
  ARROW_LIB := $(word 2,$(PYARROW))
  ARROW_SO := $(notdir $(firstword $(sort $(wildcard $(ARROW_LIB)/libarrow.so.*))))
  PARQUET_SO := $(notdir $(firstword $(sort $(wildcard $(ARROW_LIB)/libparquet.so.*))))
  ifneq ($(ARROW_SO)$(PARQUET_SO),)
    CFLAGS += -DRAP_HAVE_ARROW=1
    CXXFLAGS := -std=c++20 -O2 -g -Wall -Wextra -Wno-unused-parameter -DRAP_HAVE_ARROW=1 \
      -Iinclude -Isrc -isystem $(ARROW_INC) -MMD -MP
    LIB_CC := src/data/parquet.cc
    LDLIBS += -L$(ARROW_LIB) -l:$(PARQUET_SO) -l:$(ARROW_SO) -Wl,-rpath,$(ARROW_LIB) -lstdc++
  endif
endif

ifeq ($(CUDA),1)
  CFLAGS += -DRAP_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  # sm_90 machine code plus compute_90 PTX (docs/BUILD.md).
  NVFLAGS := -O3 -g -std=c++17 -DRAP_HAVE_CUDA=1 -Iinclude -Isrc \
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -MMD -MP
  # Preprocessing ops must match the CPU reference bit for bit: no FMA contraction.
  NVFLAGS_OPS := --fmad=false -Xcompiler -ffp-contract=off
  LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lcublasLt -lcublas -ldl -lrt -lstdc++
  # NCCL (src/dist/comm_nccl.cu) when its header is there; linked by soname so
  # that a machine with only libnccl.so.2 (no dev symlink) links too.
  NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
  ifneq ($(NCCL_H),)
    CFLAGS += -DRAP_HAVE_NCCL=1
    NVFLAGS += -DRAP_HAVE_NCCL=1
    LDLIBS += -l:libnccl.so.2
  endif
endif

LIB_C  := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
LIB_CU := $(shell find src -name '*.cu' | sort)
CLI_C  := $(sort $(wildcard src/cli/*.c))
TEST_C := $(sort $(wildcard tests/*.c))
BENCH_C := $(sort $(wildcard bench/*.c))
# helpers every benchmark links (bench/common/*.c: no main)
BENCH_COMMON_C := $(sort $(wildcard bench/common/*.c))

LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.cu.o) $(LIB_CC:%.cc=$(BUILD)/%.cc.o)
CLI_OBJ := $(CLI_C:%.c=$(BUILD)/%.o) $(BUILD)/gen/default_plan.o
TEST_OBJ := $(TEST_C:%.c=$(BUILD)/%.o)
BENCH_BIN := $(BENCH_C:bench/%.c=$(BUILD)/bench_%)
BENCH_COMMON_OBJ := $(BENCH_COMMON_C:%.c=$(BUILD)/%.o)

# Fuzzing (docs/FUZZ.md): one entry point per file format, fuzz/fuzz_FORMAT.c.
FUZZ_FORMATS := tsv gzip plan safetensors shard schedule fusion capacity predictor \
  predictor_csv xgb manifest json
FUZZ_SAN := build-fuzz-san
FUZZ_LF := build-fuzz
FORMAT ?= tsv
SECONDS ?= 60

.PHONY: all deps layers run test clean fuzz fuzz-replay fuzz-replay-bins
all: $(BUILD)/rap $(BUILD)/rap_tests $(BENCH_BIN)

deps:
	@sh scripts/deps.sh

# Which folder of src/ may include which (the table is in the script); its
# self-test first, so that a check that could not fail would not pass.
layers:
	@sh scripts/check_layers.sh --self-test
	@sh scripts/check_layers.sh

# The README's two commands. Recursive make so that packages are in place
# before anything is compiled; `test` checks the layers before building.
run: deps
	@$(MAKE) --no-print-directory -j$$(nproc) $(BUILD)/rap
	$(BUILD)/rap train

test: layers deps
	@$(MAKE) --no-print-directory -j$$(nproc) $(BUILD)/rap_tests $(BUILD)/rap
	$(BUILD)/rap_tests
	sh tests/readme_examples.sh $(BUILD)/rap
	@$(MAKE) --no-print-directory fuzz-replay

# The replay: the library built once more with ASan/UBSan into its own
# folder (kept between runs), then every entry point over fuzz/corpus/F
# and fuzz/crashes/F; any sanitizer report, crash, abort or hang fails.
fuzz-replay:
	@$(MAKE) --no-print-directory -j$$(nproc) SAN=1 CUDA=0 BUILD=$(FUZZ_SAN) fuzz-replay-bins
	@sh fuzz/replay.sh $(FUZZ_SAN) $(FUZZ_FORMATS)

fuzz-replay-bins: $(FUZZ_FORMATS:%=$(BUILD)/fuzz/fuzz_%)
.PRECIOUS: $(BUILD)/fuzz/%.o

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/common.o $(BUILD)/fuzz/replay.o $(BUILD)/librap.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lstdc++

# libFuzzer on one format: SECONDS of it, new inputs in $(FUZZ_LF)/corpus/F,
# crashes in $(FUZZ_LF)/crashes/F (copy a reproducer to fuzz/crashes/F
# with its fix). FUZZ_ARGS adds libFuzzer options.
fuzz:
	@sh scripts/deps.sh clang
	@$(MAKE) --no-print-directory -j$$(nproc) CC=clang CUDA=0 FUZZER=1 BUILD=$(FUZZ_LF) \
	  $(FUZZ_LF)/fuzz/lf_$(FORMAT)
	@mkdir -p $(FUZZ_LF)/corpus/$(FORMAT) $(FUZZ_LF)/crashes/$(FORMAT)
	$(FUZZ_LF)/fuzz/lf_$(FORMAT) -max_total_time=$(SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -artifact_prefix=$(FUZZ_LF)/crashes/$(FORMAT)/ $(FUZZ_ARGS) \
	  $(FUZZ_LF)/corpus/$(FORMAT) fuzz/corpus/$(FORMAT)

$(BUILD)/fuzz/lf_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/common.o $(BUILD)/librap.a
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS) -lstdc++

$(BUILD)/librap.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/rap: $(CLI_OBJ) $(BUILD)/librap.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/rap_tests: $(TEST_OBJ) $(BUILD)/librap.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench_%: $(BUILD)/bench/%.o $(BENCH_COMMON_OBJ) $(BUILD)/librap.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cc.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The default plan is built into rap so `rap train` runs from any directory.
$(BUILD)/gen/default_plan.c: plans/default.plan scripts/embed.sh
	@mkdir -p $(dir $@)
	sh scripts/embed.sh rap_default_plan_text $< > $@
$(BUILD)/gen/default_plan.o: $(BUILD)/gen/default_plan.c
	$(CC) $(CFLAGS) -c $< -o $@

ifeq ($(CUDA),1)
$(BUILD)/src/prep/ops/%.cu.o: src/prep/ops/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVFLAGS_OPS) -c $< -o $@
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
else
# Without nvcc a .cu file is compiled as C11: its kernels sit behind
# #ifdef __CUDACC__ and its CPU reference is plain C.
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -x c -c $< -o $@
endif

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
