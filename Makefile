# Thin wrapper over CMake: the two newcomer commands are `make demo` and `make test`.
#   make deps    install (as root) or print the Debian packages the build needs
#   make build   configure and build build/longhaul (CUDA backend too when nvcc is found)
#   make test    deps + build + ctest, then the unit tests again under ASan+UBSan, then a short fuzz run
#   make demo    build, then run examples/demo.jsonl on the embedded model
#   make bench   build, then run the benchmarks under bench/
#   make fuzz    build the libFuzzer targets in build-fuzz/
#   make install build, then install into PREFIX (default /usr/local; DESTDIR honoured): bin/longhaul,
#                its man page and bash completion, share/longhaul/ (NIAH haystack, embedded model)
#                and share/doc/longhaul/ (README, LICENSE, examples/slurm); NO_BUILD=1 skips the
#                build step and BUILD_DIR names an existing build folder (default build)
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
BUILD_DIR ?= build
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 20

.PHONY: all deps deps-test build test test-asan fuzz fuzz-short demo bench install clean
all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j $(JOBS)

test: deps-test build
	cd build && ctest --output-on-failure -j $(JOBS) --timeout 1800
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz-short

# exitcode=23: a sanitizer report exits with a status no test expects; with ASan's default (1) a
# leak in a command that is meant to fail (exit 1) would pass unnoticed.
test-asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLH_SANITIZE=ON -DLH_CUDA=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:exitcode=23 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure -j $(JOBS) -L unit --timeout 1800

fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLH_FUZZ=ON -DLH_CUDA=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_targets

fuzz-short: fuzz
	@tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

demo: build
	@examples/demo.sh

bench: build
	@bench/run.sh

install: $(if $(NO_BUILD),,build)
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD_DIR) --prefix "$(PREFIX)"

clean:
	rm -rf build build-asan build-fuzz
