# keras-caffe
#   make demo          install into .venv, run examples/demo.py and a short LeNet `keras-caffe train`
#   make test          install into .venv (newest TensorFlow) and run the whole suite, then the
#                      kernel-sensitive tests again with the other CPU kernels (oneDNN / Eigen)
#                      (Horovod 0.28.1 built first with `keras-caffe install-horovod`)
#   make test-quick    the edit loop: the tests marked `quick` (no processes, no whole-net
#                      training; tests/support/tiers.py), no Horovod build; a few minutes
#   make test-compat   the tests marked `compat` (tests/support/tiers.py) in .venv-tf216 (the oldest
#                      TensorFlow setup.cfg allows, + Horovod) with the CPU kernels TensorFlow
#                      does not pick by default
#   make test-backends the tests of the core that runs on every Keras backend (tests/support/tiers.py
#                      BACKENDS) on JAX and on PyTorch, each in its own venv without TensorFlow
#                      (.venv-jax, .venv-torch; CPU builds); make test-jax / test-torch: one of them
#   make verify-claims the experiments behind the docs' research claims (docs/claims.md); each
#                      exits non-zero when its claim fails
#   make bench         benchmarks/ (not part of the tests)
#   make bench-horovod benchmarks/allreduce_overhead.py in .venv (builds Horovod)
#   make proto         regenerate keras_caffe/proto/caffe_pb2.py from caffe.proto
#   make deps / horovod / compat-deps / compat-horovod: one install step (.ci/run times each)

PYTHON ?= python3
VENV ?= .venv
# Empty: TensorFlow comes through the README's install line, the `tensorflow`
# extra. Set (test-compat): that TensorFlow first, then the package without
# the extra, which must leave it alone (issue 13).
TF_SPEC ?=
EXTRAS ?= test,lmdb,leveldb,plots
# HOROVOD=1: `install` builds Horovod too (`test` always does, unless TEST_HOROVOD=0;
# `demo` never needs it).
HOROVOD ?= 0
TEST_HOROVOD ?= 1
# The oldest TensorFlow setup.cfg allows (test-compat).
TF_FLOOR_SPEC ?= tensorflow-cpu==2.16.2
TF_FLOOR_VENV ?= .venv-tf216
# Horovod 0.28.1's sdist, downloaded once; `keras-caffe install-horovod` checks its sha256.
KERAS_CAFFE_CACHE ?= $(HOME)/.cache/keras-caffe
HOROVOD_SDIST = $(KERAS_CAFFE_CACHE)/horovod-0.28.1.tar.gz
BIN = $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install deps horovod compat-deps compat-horovod demo test test-quick test-compat \
	jax-deps torch-deps test-backends test-jax test-torch \
	test-durations verify-claims bench bench-horovod proto clean

# A fresh Debian needs python3-venv for `python3 -m venv`.
$(BIN)/python:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y python3-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

# Dependencies, once per venv (again when setup.cfg changes); then exactly
# one TensorFlow distribution may be installed. With TF_SPEC, another
# TensorFlow distribution already in the venv is removed first, not
# overwritten (a venv made when TF_SPEC named `tensorflow`).
TF_DISTS = ^(tensorflow|tensorflow-cpu|tensorflow-gpu|tensorflow-intel|tf-nightly|tf-nightly-cpu)==
# pip list, names normalised as pip's metadata may spell them (tensorflow_cpu)
PIP_LIST = $(BIN)/pip list --format=freeze | tr '_' '-'
TF_NAME = $(firstword $(subst =, ,$(subst >, ,$(subst <, ,$(subst [, ,$(TF_SPEC))))))
$(VENV)/.deps: setup.cfg | $(BIN)/python
ifeq ($(TF_SPEC),)
	$(BIN)/pip install --quiet ".[tensorflow,$(EXTRAS)]"
else
	@other=$$($(PIP_LIST) | grep -iE '$(TF_DISTS)' | grep -viE '^$(TF_NAME)==' | cut -d= -f1); \
	if [ -n "$$other" ]; then set -x; $(BIN)/pip uninstall --quiet -y $$other; fi
	$(BIN)/pip install --quiet "$(TF_SPEC)" ".[$(EXTRAS)]"
endif
	@n=$$($(PIP_LIST) | grep -ciE '$(TF_DISTS)'); [ "$$n" = 1 ] || \
		{ echo "$(VENV): $$n TensorFlow distributions installed, expected 1 (issue 13): rm -rf $(VENV) and run make again" >&2; exit 1; }
	touch $@

$(HOROVOD_SDIST): | $(BIN)/python
	mkdir -p $(KERAS_CAFFE_CACHE)
	$(BIN)/pip download --quiet --no-deps --no-binary :all: --dest $(KERAS_CAFFE_CACHE) horovod==0.28.1

# Horovod 0.28.1 built by the package's own command (docs/horovod.md): the
# sdist, sha256-checked and patched, compiled against the venv's TensorFlow
# (pip --no-deps --no-build-isolation), Gloo only. Run again when
# keras_caffe/horovod_build/ changes; the verified wheel is cached in
# $(KERAS_CAFFE_CACHE)/horovod/<key>/ (key: sdist, patches, TensorFlow and its
# flags, compiler, Python, build variables) and reinstalled, after the same
# import check, when the key matches: keep that folder between CI runs.
# The command checks cmake/make/g++/Python.h itself.
HOROVOD_APT = cmake make g++
$(VENV)/.horovod: $(VENV)/.deps $(HOROVOD_SDIST) $(wildcard keras_caffe/horovod_build/*.py)
	@dpkg -s $(HOROVOD_APT) >/dev/null 2>&1 || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y $(HOROVOD_APT))
	$(BIN)/pip install --quiet --no-deps --no-build-isolation --force-reinstall . && rm -rf build
	$(BIN)/keras-caffe install-horovod --sdist $(HOROVOD_SDIST) --jobs $$(nproc) \
		--cache-dir $(KERAS_CAFFE_CACHE)
	touch $@

ifeq ($(HOROVOD),1)
INSTALL_DEPS = $(VENV)/.deps $(VENV)/.horovod
else
INSTALL_DEPS = $(VENV)/.deps
endif
ifeq ($(TEST_HOROVOD),1)
TEST_DEPS = $(VENV)/.horovod
endif

# One install step each, so that .ci/run can time them apart; the compat-
# ones in the compat venv.
FLOOR = VENV=$(TF_FLOOR_VENV) TF_SPEC="$(TF_FLOOR_SPEC)"
deps: $(VENV)/.deps
horovod: $(VENV)/.horovod
compat-deps:
	$(MAKE) --no-print-directory deps $(FLOOR)
compat-horovod:
	$(MAKE) --no-print-directory horovod $(FLOOR)

# The package itself, rebuilt from the working tree every time (not editable:
# the suite tests the installed wheel, not the source tree).
install: $(INSTALL_DEPS)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation --force-reinstall .

LENET = examples/lenet_solver

demo: install
	$(BIN)/python examples/demo.py
	$(BIN)/python $(LENET)/make_data.py --train 10000 --test 2000
	cd $(LENET) && ../../$(BIN)/keras-caffe train --solver lenet_solver_demo.prototxt --log caffe

# TensorFlow runs oneDNN's CPU kernels on CPUs with AVX-512-class features
# and Eigen's elsewhere (AMD AVX2): the suite runs with both. KERNELS prints
# the family this venv gets by default (from /, so the source tree is not
# imported); OTHER_ONEDNN is TF_ENABLE_ONEDNN_OPTS for the other family.
KERNELS = cd / && TF_CPP_MIN_LOG_LEVEL=3 $(abspath $(BIN))/python -m keras_caffe.kernels 2>/dev/null
OTHER_ONEDNN = [ "$$($(KERNELS))" = oneDNN ] && echo 0 || echo 1
# TEST_WORKERS: pytest-xdist processes, whole test files each (module
# fixtures and caches stay in one process). Two: much of the suite waits on
# one core for a child process to import TensorFlow (4 files on a 2-core
# machine: 387 s in one process, 243 s in two); 0: one process, as plain
# pytest. The workers take files in collection order, which conftest.py
# makes longest first from tests/durations.json (make test-durations).
TEST_WORKERS ?= 2
PYTEST = KERAS_CAFFE_EXPECT_INSTALLED=1 KERAS_CAFFE_EXPECT_HOROVOD=$(TEST_HOROVOD) \
	KERAS_CAFFE_HOROVOD_SDIST=$(HOROVOD_SDIST) $(BIN)/pytest -n $(TEST_WORKERS) \
	--dist loadfile --no-loadscope-reorder
# test: TensorFlow's default kernels, then the kernel-sensitive tests (marker
# `kernels`: convolution family, LMS, golden parity) with the other family.
# SUITE_KERNELS=other (test-compat) runs the suite with the other family.
SUITE_KERNELS ?= default
SUITE_ARGS ?=
# KERNELS_AGAIN=0: no second pass of the `kernels` tests (.ci/run, whose
# test-compat runs every test with the other family anyway).
KERNELS_AGAIN ?= 1

test: $(TEST_DEPS) install
ifeq ($(SUITE_KERNELS),other)
	@other=$$($(OTHER_ONEDNN)); \
	echo "== the suite with the other CPU kernels: TF_ENABLE_ONEDNN_OPTS=$$other (TensorFlow's default here: $$($(KERNELS)))"; \
	TF_ENABLE_ONEDNN_OPTS=$$other $(PYTEST) $(SUITE_ARGS)
else
	@echo "== the suite with TensorFlow's default CPU kernels here: $$($(KERNELS))"
	$(PYTEST) $(SUITE_ARGS)
ifeq ($(KERNELS_AGAIN),1)
	@other=$$($(OTHER_ONEDNN)); \
	echo "== the kernel-sensitive tests again with the other CPU kernels: TF_ENABLE_ONEDNN_OPTS=$$other"; \
	TF_ENABLE_ONEDNN_OPTS=$$other $(PYTEST) -m kernels
endif
endif

# The edit loop: the tests marked `quick` by conftest.py from tests/support/tiers.py
# (every file but those that start processes or train whole nets, and no
# `slow` test), in .venv with TensorFlow's default kernels; Horovod is not
# built (its unit tests skip without it, as they do outside make test).
test-quick:
	$(MAKE) --no-print-directory test TEST_HOROVOD=0 KERNELS_AGAIN=0 SUITE_ARGS='-m quick'

# The oldest TensorFlow setup.cfg allows (2.16: protobuf 4, NumPy 1), with
# Horovod built by the same command: the tests marked `compat` (those marked
# `kernels`, and the files tests/support/tiers.py names: protobuf, HDF5 and NumPy
# generations, saving formats, tf.data, Horovod's build, installing beside
# tensorflow-cpu) with the CPU kernels TensorFlow does not pick here, so that
# with `make test` every kernel-sensitive test runs under both families. Less
# the tests marked `slow`, whose subject is an algorithm or a process
# boundary that one TensorFlow shows as well as another.
test-compat:
	$(MAKE) --no-print-directory test $(FLOOR) SUITE_KERNELS=other SUITE_ARGS='-m "compat and not slow"'

# make test, recording each file's seconds into tests/durations.json (commit
# it): the suite's files run longest first, so that no long file is left
# to one worker at the end.
test-durations:
	KERAS_CAFFE_RECORD_DURATIONS=1 $(MAKE) --no-print-directory test KERNELS_AGAIN=0

# The core on JAX and on PyTorch (tests/support/tiers.py BACKENDS): one venv
# each, made from setup.cfg's extra for that backend and without TensorFlow
# (checked: these runs show the core needs none). Pinned to what the suite
# was measured with; PyTorch's CPU build: on Linux PyPI's plain `torch` is a
# CUDA build of several GB.
JAX_VENV ?= .venv-jax
TORCH_VENV ?= .venv-torch
JAX_SPEC ?= jax==0.10.2
TORCH_SPEC ?= torch==2.13.0
BACKEND_EXTRAS ?= test
NO_TENSORFLOW = -c 'import importlib.util, sys; \
	sys.exit("TensorFlow is installed here: rm -rf this venv and make again" \
	if importlib.util.find_spec("tensorflow") else 0)'

# backend_venv VENV SPEC EXTRA: the venv with that backend, its extra and the
# package (rebuilt from the working tree each time, as `install` does).
define backend_venv
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
		($(SUDO) apt-get update && $(SUDO) apt-get install -y python3-venv)
	[ -x $(1)/bin/pip ] || $(PYTHON) -m venv --clear $(1)  # again if a run stopped half-way
	$(1)/bin/pip install --quiet --upgrade pip setuptools wheel
	$(1)/bin/pip install --quiet "$(2)" ".[$(3),$(BACKEND_EXTRAS)]" && rm -rf build
	$(1)/bin/python $(NO_TENSORFLOW)
endef

$(JAX_VENV)/.deps: setup.cfg
	$(call backend_venv,$(JAX_VENV),$(JAX_SPEC),jax)
	touch $@
$(TORCH_VENV)/.deps: setup.cfg
	$(call backend_venv,$(TORCH_VENV),$(TORCH_SPEC),torch)
	touch $@
jax-deps: $(JAX_VENV)/.deps
torch-deps: $(TORCH_VENV)/.deps

# BACKEND_SET=ci (.ci/run): of the BACKENDS files, the golden tests (BVLC
# Caffe's solver trajectories, Caffe's own solver test, the lr policies, the
# golden forward nets LeNet to GoogLeNet, Caffe's snapshots, files saved on
# each backend), the checks of the backend machinery itself, and JAX's data
# parallelism (N virtual devices, two processes, local sums; they skip on
# PyTorch but for the refusal and the benchmark's arithmetic), to keep CI in
# its budget (all of BACKENDS took 24+ minutes on JAX on a shared 2-core
# machine). Empty: all of BACKENDS (make test-backends). tests/test_tiers.py
# checks that each file here is in BACKENDS.
BACKEND_SET ?=
BACKEND_CI_FILES = tests/optimizers/test_golden_solvers.py tests/optimizers/test_caffe_solver_port.py \
	tests/test_schedules.py tests/importers/net/test_golden_forward.py \
	tests/importers/snapshots/test_snapshot.py tests/importers/snapshots/test_snapshot_backends.py \
	tests/test_saved_models.py tests/callbacks/test_callbacks_backends.py tests/test_backends.py \
	tests/importers/net/test_backend_support.py tests/cli/test_cli_backends.py tests/test_devices.py \
	tests/examples/test_example_any_backend.py tests/test_install_without_tensorflow.py \
	tests/distributed/test_jax_data_parallel.py tests/distributed/test_jax_local_sums.py \
	tests/distributed/test_jax_multiprocess.py tests/benchmarks/test_jax_data_parallel_benchmark.py
ifeq ($(BACKEND_SET),ci)
BACKEND_ARGS = $(BACKEND_CI_FILES)
endif

# test_backend VENV BACKEND [ENV]: the package reinstalled, then the BACKENDS files
# with KERAS_BACKEND set (conftest.py collects only those there).
define test_backend
	$(1)/bin/pip install --quiet --no-deps --no-build-isolation --force-reinstall . && rm -rf build
	@echo "== the tests of the core on $(2) ($(1), no TensorFlow)"
	$(3) KERAS_BACKEND=$(2) KERAS_CAFFE_EXPECT_INSTALLED=1 $(1)/bin/pytest -n $(TEST_WORKERS) \
		--dist loadfile --no-loadscope-reorder $(BACKEND_ARGS) $(SUITE_ARGS)
endef

test-jax: $(JAX_VENV)/.deps
	$(call test_backend,$(JAX_VENV),jax)
# One PyTorch thread per pytest worker: with its default (every core) in each
# of two workers, the YellowFin files took 229 s against 15.5 s on 2 cores.
test-torch: $(TORCH_VENV)/.deps
	$(call test_backend,$(TORCH_VENV),torch,OMP_NUM_THREADS=1)
test-backends: test-jax test-torch

# The research claims of docs/claims.md, each a benchmark at the claim's size
# that exits 1 when the claim fails (about 20 CPU minutes in all); the suite
# keeps smoke tests of the same code (tests/optimizers/test_yellowfin_no_tuning.py,
# tests/optimizers/test_yellowfin_closed_loop.py).
verify-claims: install
	$(BIN)/python benchmarks/yellowfin_no_tuning.py --seeds 0,1,2 --check
	$(BIN)/python benchmarks/yellowfin_closed_loop.py --check

bench: install
	$(BIN)/python benchmarks/optimizer_step.py
	$(BIN)/python benchmarks/import_speed.py
	$(BIN)/python benchmarks/yellowfin_overhead.py
	$(BIN)/python benchmarks/yellowfin_no_tuning.py
	$(BIN)/python benchmarks/pipelines.py
	$(BIN)/python benchmarks/train_vs_caffe.py
	$(BIN)/python benchmarks/profile_step.py --net cifar10_quick
	$(BIN)/python benchmarks/lms_tradeoff.py

bench-horovod:
	$(MAKE) --no-print-directory install HOROVOD=1
	$(BIN)/python benchmarks/allreduce_overhead.py

# protoc 25 (grpcio-tools 1.62.3) writes gencode without a runtime version
# check, which loads under protobuf 4.x to 7.x: every TensorFlow we support.
proto:
	$(PYTHON) -m venv .venv-protoc
	.venv-protoc/bin/pip install --quiet grpcio-tools==1.62.3
	.venv-protoc/bin/python -m grpc_tools.protoc -I. --python_out=. keras_caffe/proto/caffe.proto

clean:
	rm -rf build dist *.egg-info .venv .venv-tf216 .venv-tf218 .venv-protoc .venv-jax .venv-torch $(LENET)/digits_*_lmdb $(LENET)/snapshots
