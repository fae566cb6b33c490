# Thin wrapper over CMake: `make demo` runs the main job, `make test` runs every test.
# Both install what they need first (Debian packages, through apt-get, only when missing).

BUILD ?= build
BUILD_SAN ?= build-sanitize
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
SAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# The CUDA code is built wherever nvcc exists, on PATH or in the toolkit's usual place.
CUDACXX ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifneq ($(CUDACXX),)
export CUDACXX
endif

.PHONY: all deps build test test-c test-sanitize demo bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCAKE_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# Every test: the C library (CTest: cmocka, MPI under mpirun, GPU ones skip without a GPU), then
# the PyTorch binding (pytest).
test: test-c test-python

test-c: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
test-sanitize: deps
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DCAKE_WERROR=ON -DCAKE_BUILD_BENCH=OFF \
	  -DCAKE_ENABLE_CUDA=OFF \
	  -DCMAKE_C_FLAGS="$(SAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(SAN_FLAGS)" \
	  -DCMAKE_SHARED_LINKER_FLAGS="$(SAN_FLAGS)" $(CMAKE_FLAGS)
	cmake --build $(BUILD_SAN) -j $(JOBS)
	ctest --test-dir $(BUILD_SAN) --output-on-failure -j $(JOBS)

# Open MPI wants --oversubscribe for more ranks than cores and --allow-run-as-root as root.
NP ?= 4
MPIRUN ?= mpirun
MPIRUN_FLAGS ?= $(shell $(MPIRUN) --version 2>/dev/null | grep -q 'Open MPI' && \
  echo --oversubscribe $$([ "$$(id -u)" = 0 ] && echo --allow-run-as-root))
DEMO_ARGS ?=

demo: build
	$(MPIRUN) $(MPIRUN_FLAGS) -np $(NP) $(BUILD)/tools/cake-demo $(DEMO_ARGS)

bench: build
	$(BUILD)/bench/bench_cpu

clean:
	rm -rf $(BUILD) $(BUILD_SAN) build-python

# The PyTorch binding (python/cake): PyPI's torch (pinned) and pytest in a venv of
# /usr/bin/python3 (scripts/install-python-deps.sh), the package built as a wheel and installed
# from it (as `pip install .` does), its tests; CAKE_WHEEL lets them check pip installs beside
# FlashInfer. The CUDA tests skip without a GPU. First a static check (pylint, only errors a
# test on a CPU cannot reach: unreachable code, missing attributes, undefined names).
PY_VENV ?= build-python/venv
PY_DIST ?= build-python/dist
PYTEST_FLAGS ?= -q --durations=15

.PHONY: test-python
test-python:
	@scripts/install-python-deps.sh $(PY_VENV)
	$(PY_VENV)/bin/python -m pylint --jobs=2 --score=n --disable=all \
	  --enable=unreachable,no-member,undefined-variable,used-before-assignment \
	  python/cake python/tests examples bench dev/*.py
	rm -rf $(PY_DIST)
	$(PY_VENV)/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w $(PY_DIST) .
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps $(PY_DIST)/cake-*.whl
	env -u CAKE_LIBRARY CAKE_WHEEL="$$(ls $(PY_DIST)/cake-*.whl)" $(PY_VENV)/bin/python -m pytest -p no:cacheprovider $(PYTEST_FLAGS) python/tests
