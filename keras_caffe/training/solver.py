"""``keras_caffe.Solver``: ``caffe train -solver solver.prototxt``, in Keras.

Mirrors pycaffe's ``caffe.get_solver(path)``: ``solver.net`` (the train
net, a compiled Keras model), ``solver.test_nets``, ``solver.iter``,
``solver.step(n)``, ``solver.solve(resume_file)``, ``solver.snapshot()``,
``solver.restore(path)``, ``solver.test_all()``; so Caffe training scripts
port line by line. ``keras-caffe train`` is a thin command line over it.

What runs is Caffe's ``Solver::Solve`` / ``Solver::Step``: test every
``test_interval`` iterations (and before the first unless
``test_initialization: false``), ``iter_size`` forward/backward passes per
iteration, the smoothed loss over ``average_loss`` iterations, Caffe's log
lines every ``display`` iterations, snapshots every ``snapshot``
iterations and after training. The train step is a compiled TensorFlow
function (see ``keras_caffe.training.step``); data comes from the data layers'
``tf.data`` pipelines (``keras_caffe.importers.data.pipelines``).

Resume is exact: the data pipelines are pure functions of (seed, position),
the snapshot records the seed, the positions of every data stream and the
model's random-generator states, so N iterations, a snapshot, a new process
and N more give the weights of 2N uninterrupted iterations. (Caffe's own
resume restarts its data layers at the first record.)

Under Horovod (``horovodrun -np P keras-caffe train ...``, or a script that
called ``keras_caffe.distributed.init()``) the Solver trains data-parallel,
as Caffe's multi-GPU ``caffe train -gpu all`` does: each worker reads its
own share of the training batches (``shard``), the gradients of each pass
are averaged with one all-reduce before the update, so every worker holds
the same weights (broadcast from rank 0 at the start and after a restore);
rank 0 alone logs and snapshots, as Caffe's root solver does. Each worker
runs the tests on the whole test set (same weights, same numbers; Caffe
tests on the root solver only). The global batch is ``P`` times the net's
batch; the rate is the solver file's unless ``scale_lr`` is given.

With ``devices=[...]`` (``keras-caffe train --gpu 0,1``) one process trains
on several devices under ``tf.distribute.MirroredStrategy``, as Caffe's
``caffe train -gpu 0,1`` does: device ``d`` of ``D`` reads the training
batches ``d, d + D, ...`` (so ``D`` devices with batch ``B`` read what one
device with batch ``D B`` reads), the devices' gradients are summed once per
iteration before Caffe's update (``keras_caffe.optimizers.replicas``), and
the tests run on the first device. Not with Horovod (one engine at a time).

With ``elastic=True`` (``keras-caffe train --elastic`` under ``horovodrun
--min-np ... --host-discovery-script ...``) a lost worker does not stop
the job: the state is committed every ``commit_every`` iterations, and the
survivors go back to the last commit, re-shard the data for the new number
of workers and continue (``keras_caffe.distributed.elastic_solver``).

Signals (``solve(sigint_effect=, sighup_effect=)``, ``keras-caffe train
-sigint_effect``): while ``solve`` runs, Ctrl-C (SIGINT) and SIGTERM stop
training after the running iterations, write the snapshot
``snapshot_after_train`` asks for and log "Optimization stopped early.";
SIGHUP writes a snapshot and training goes on: Caffe's ``-sigint_effect
stop`` / ``-sighup_effect snapshot`` (``keras_caffe.training.signals``). The solver
looks at the signals where Caffe does, after an iteration and after a test
pass, but runs up to ``MAX_CHUNK`` iterations (never across a display, test
or snapshot point) in one compiled call, and looks after the call. Under
Horovod the workers agree at each look (one all-reduce of two flags), so a
signal to any worker stops, or snapshots, all of them at the same iteration.
"""

import contextlib
import os
import sys
import time

import keras
import tensorflow as tf

from keras_caffe.training import resume_state as solver_state
from keras_caffe._checks import check_int
from keras_caffe.training.caffe_log import CaffeLog, SmoothedLoss
from keras_caffe.distributed.faults import failures
from keras_caffe.errors import (ArgumentError, DistributedError, KerasCaffeError, SolverError,
                                WeightsError)
from keras_caffe.importers.data.read_errors import pipeline_errors
from keras_caffe.training.step import (NetOutputs, mirrored_train_function, resolve_jit,
                                  test_function, train_function)
from keras_caffe.training.progress import ProgressLog
from keras_caffe.proto import caffe_pb2
from keras_caffe.training.random_state import random_states, restore_random_states
from keras_caffe.training.signals import NOTHING, SIGHUP_EFFECT, SIGINT_EFFECT, SignalEffects, agree

_FORMATS = {caffe_pb2.SolverParameter.BINARYPROTO: "caffe", caffe_pb2.SolverParameter.HDF5: "caffe_hdf5"}
_LOGS = ("caffe", "progress", None)
#: The most iterations one compiled call runs between two log/test/snapshot points.
MAX_CHUNK = 100
#: Seed of the data pipelines and initial weights when the solver sets none.
_STATE_VERSION = 1


class Solver:
    """A Caffe solver file, trained with Keras.

    Args:
        solver: path to a ``solver.prototxt`` (or its text / a parsed
            ``SolverParameter``). Net files and data sources named in it are
            looked up from the current directory, as Caffe does, then next to
            the solver file.
        weights: ``.caffemodel`` path(s) to start from (fine-tuning; Caffe's
            ``-weights``, comma-separated or a list).
        data_format: ``"channels_last"`` (fast) or ``"channels_first"``.
        arrays: ``{top: array}`` for MemoryData / Input layers.
        log: ``"caffe"`` (Caffe's log lines on ``stream``, default stderr),
            ``"progress"`` (a Keras progress bar) or None.
        jit_compile: XLA for the train and test steps; ``"auto"``: on GPUs.
        snapshot_format: ``"caffe"``, ``"caffe_hdf5"`` or ``"keras"``;
            default: the file's ``snapshot_format`` (BINARYPROTO -> ``"caffe"``).
        shard_index, num_shards: read this worker's share of the training
            data; default: this worker's rank and the number of workers
            under Horovod, else all of it.
        distributed: ``"auto"`` (default): data-parallel when Horovod is
            initialized with more than one worker; ``False``: never.
        scale_lr: under Horovod, multiply the rate by the number of workers
            (the large-batch rule) after a linear warm-up of
            ``warmup_iters`` iterations (``keras_caffe.distributed.ScaledLearningRate``).
        lms: a ``keras_caffe.LMS`` (Large Model Support) for the train net;
            default: the enclosing ``with keras_caffe.LMS(...)`` block's, if any.
        devices: TensorFlow device names (``["GPU:0", "GPU:1"]``,
            ``["CPU:0", "CPU:1"]`` with logical CPU devices) to train on with
            ``tf.distribute.MirroredStrategy``, each running the net's batch;
            one name: that device alone. Default: the solver file's
            ``solver_mode`` / ``device_id``.
        elastic: under an elastic ``horovodrun``, recover from lost workers
            and take in new ones (``solve`` commits every ``commit_every``
            iterations; default: ``display``, else ``snapshot``, else 100).
        max_iter: train to this iteration instead of the file's ``max_iter``
            (an integer >= 1; ``keras-caffe train --max-iter``).

    After ``solve``, ``stopped_early`` names the signal(s) that stopped
    training (``"SIGINT"``), or is None.
    """

    def __init__(self, solver, *, weights=None, data_format="channels_last", arrays=None,
                 log="caffe", stream=None, jit_compile="auto", snapshot_format=None,
                 shard_index=None, num_shards=None, distributed="auto", scale_lr=False,
                 warmup_iters=0, lms=None, devices=None, elastic=False,
                 commit_every=None, max_iter=None):
        from keras_caffe.distributed.context import worker
        from keras_caffe.importers.formats.solver_file import read_solver
        from keras_caffe.kernels import pool_cpu_memory

        # effective when this is the first TensorFlow work in the process
        pool_cpu_memory(lms=lms is not None or _lms_current() is not None, start=True)
        if log not in _LOGS:
            raise KerasCaffeError(f"Solver: log must be one of {_LOGS}, got {log!r}")
        if distributed not in ("auto", False):
            raise KerasCaffeError(f"Solver: distributed must be 'auto' or False, got "
                                  f"{distributed!r}")
        self.param, self.source = read_solver(solver)
        if max_iter is not None:
            self.param = _with_max_iter(self.param, check_int("Solver", "max_iter", max_iter, low=1))
        p = self.param
        self.stopped_early = None
        self._signals = None  # the SignalEffects while solve runs
        self._report = None  # the ProgressLog in progress mode
        self._snapshot_iter = None  # the iteration of this process's last snapshot
        self.elastic = _elastic_option(elastic, commit_every, shard_index, num_shards)
        self.commit_every = commit_every or p.display or p.snapshot or MAX_CHUNK
        self._on_commit = None  # set while elastic training runs
        self.worker = worker() if distributed == "auto" else _single()
        self.distributed = self.worker.size > 1
        self._log = CaffeLog(stream, enabled=self.worker.is_chief) if log == "caffe" else None
        self._log_mode = log
        self._progress = log == "progress" and self.worker.is_chief
        self._data_format = data_format
        self._arrays = arrays
        if shard_index is None and num_shards is None:
            shard_index, num_shards = self.worker.rank, self.worker.size
        self._shard = (shard_index, num_shards)
        self._check_param()
        self.devices = _resolve_devices(devices)
        if len(self.devices) > 1 and self.distributed:
            raise DistributedError(
                f"Solver: devices={list(devices)} (tf.distribute.MirroredStrategy) under Horovod "
                f"with {self.worker.size} workers: use one engine at a time (horovodrun with one "
                "device per worker, or several devices in one process)")
        if len(self.devices) > 1 and (lms is not None or _lms_current() is not None):
            raise ArgumentError("Solver", "lms", "is not supported with several devices")
        self._strategy = tf.distribute.MirroredStrategy(self.devices) \
            if len(self.devices) > 1 else None
        self.seed = p.random_seed if p.random_seed >= 0 else int.from_bytes(os.urandom(4), "little") >> 1
        if self.distributed and not self.elastic:  # elastic: the first sync does it
            from keras_caffe.distributed.state import broadcast_object

            self.seed = broadcast_object(self.seed)  # one data order and init for all workers
        self._device = self._choose_device()
        self._jit = resolve_jit(jit_compile)
        keras.utils.set_random_seed(self.seed)
        train, tests = self._net_sources()
        with self._scope():
            self._train = self._import(train, "TRAIN",
                                       p.train_state if p.HasField("train_state") else None)
        self.net = self._train.model
        self._attach_lms(lms)
        self._train_outputs = NetOutputs(self.net)
        self._tests = [self._import(spec, "TEST", state) for spec, state in tests]
        self.test_nets = [t.model for t in self._tests]
        self._test_outputs = [NetOutputs(m) for m in self.test_nets]
        if weights:
            self.copy_from(weights)
        from keras_caffe.importers.net.compile_args import training_args

        with self._scope():
            self.optimizer = self._make_optimizer(scale_lr, warmup_iters)
            self.net.compile(optimizer=self.optimizer, jit_compile=self._jit,
                             **training_args(self.net))
            self.optimizer.build(self.net.trainable_variables)
        self._shared = [self._shared_variables(m) for m in self.test_nets]
        self._train_pipes = self._train_pipelines()
        self._test_pipes = [self._pipeline(t, "TEST", (0, 1)) for t in self._tests]
        self._tests_done = 0
        self._open_streams(train_batches=0, test_batches=[0] * len(self._tests))
        if self.distributed and not self.elastic:
            from keras_caffe.distributed import broadcast_state

            broadcast_state(self.net, self.optimizer)
        self._build_train_step()
        self._run_tests = [test_function(o, self._jit) for o in self._test_outputs]
        self._smoothed = SmoothedLoss(p.average_loss, 0)
        self.snapshot_format = snapshot_format or _FORMATS[p.snapshot_format]
        if self.snapshot_format not in ("caffe", "caffe_hdf5", "keras"):
            raise KerasCaffeError(f"Solver: snapshot_format must be 'caffe', 'caffe_hdf5' or "
                                  f"'keras', got {self.snapshot_format!r}")
        if self._log:
            workers = (f", {self.worker.size} workers (Horovod), global batch x{self.worker.size}"
                       if self.distributed else "")
            if self._strategy is not None:
                workers = (f", {len(self.devices)} devices (MirroredStrategy: "
                           f"{', '.join(self.devices)}), global batch x{len(self.devices)}")
            self._log.info(f"Solver scaffolding done ({self._device}, XLA "
                           f"{'on' if self._jit else 'off'}, random_seed {self.seed}{workers}).",
                           "solver.cpp:57")

    # -- lifetime --------------------------------------------------------------------

    def close(self):
        """Release the data streams (tf.data iterators and their database
        handles). The Solver cannot train after this.

        Freeing an iterator can block for up to a minute: TensorFlow's
        autotuning thread can miss the wake-up that ends its sleep (see
        ``keras_caffe.cli.quick_exit``). ``keras-caffe train`` therefore ends
        its process after training without calling this."""
        self._train_streams = []
        self._test_streams = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- pycaffe's attributes -------------------------------------------------------

    @property
    def iter(self):
        """Caffe's ``iter_``: iterations (updates) done."""
        return int(self.optimizer.iterations.numpy())

    @property
    def max_iter(self):
        return self.param.max_iter

    def copy_from(self, weights):
        """Load ``.caffemodel`` weights into the train net (Caffe's ``-weights``;
        test nets share the train net's weights at each test).

        Layers are copied by name (``Net::CopyTrainedLayersFrom``): layers of
        the file the net lacks are ignored, layers of the net the file lacks
        (renamed for fine-tuning, or new) keep their fillers' values; both
        are reported. Weights sharing no layer name with the net are refused:
        they are another net's. Returns the ``CopyReport`` of each file.
        """
        from keras_caffe.importers.net.importing import copy_layers
        from keras_caffe.importers.net.weights import load_weights

        paths = weights.split(",") if isinstance(weights, str) else list(weights)
        reports = []
        for path in paths:
            if self._log:
                self._log.info(f"Finetuning from {path}", "solver.cpp:72")
            found = load_weights(path)
            report = copy_layers(self.net, found, source=str(path))
            if not report.copied:
                raise WeightsError(
                    f"{path}: none of its layers ({_names(found)}) is a layer of the net with "
                    f"blobs ({_names(report.kept)}): weights of another net? Caffe copies "
                    "weights by layer name")
            self._report_copy(path, report, list(found))
            reports.append(report)
        return reports

    def _report_copy(self, path, report, order):
        """What ``copy_from`` copied. Caffe's log: Net::CopyTrainedLayersFrom's
        lines, layer by layer in the file's order ("Copying source layer",
        Caffe's debug line, and "Ignoring source layer"), then a summary;
        progress mode: the summary alone, one line on stderr."""
        copied = set(report.copied)
        summary = f"Copied {len(report.copied)} layer(s) from {path}: {_names(report.copied)}"
        kept = (f"Not in {path}, learned from their fillers: {_names(report.kept)}"
                if report.kept else "")
        if self._log:
            for name in order:
                if name in copied:
                    self._log.line("net.cpp:749", f"Copying source layer {name}")
                elif name in report.ignored:
                    self._log.line("net.cpp:746", f"Ignoring source layer {name}")
            for line in (summary, kept):
                if line:
                    self._log.info(line)
        elif self._progress:
            ignored = (f". Ignoring source layer(s) not in the net: {_names(report.ignored)}"
                       if report.ignored else "")
            print(summary + ignored + (f". {kept}" if kept else ""), file=sys.stderr)

    # -- Caffe's loop --------------------------------------------------------------

    def solve(self, resume_file=None, *, sigint_effect=SIGINT_EFFECT,
              sighup_effect=SIGHUP_EFFECT):
        """Train to ``max_iter`` (resuming from a ``.solverstate`` if given),
        snapshot after training, test at the end: ``Solver::Solve``.

        ``sigint_effect`` / ``sighup_effect``: what SIGINT (Ctrl-C) and SIGHUP
        do while it runs, as Caffe's ``-sigint_effect`` / ``-sighup_effect``:
        ``"stop"`` (SIGINT's default: stop, write the ``snapshot_after_train``
        snapshot, return with ``stopped_early`` set), ``"snapshot"`` (SIGHUP's
        default: write a snapshot, go on) or ``"none"`` (ignore it). SIGTERM
        always stops. The handlers are installed for the duration of the call
        and the previous ones put back; called from a thread other than the
        main thread, ``solve`` installs none and leaves signals alone (Python
        delivers signals to the main thread only).
        """
        effects = SignalEffects(sigint_effect, sighup_effect)
        self.stopped_early = None
        self._report = self._new_report() if self._progress else None
        with effects:
            self._signals = effects
            try:
                self._solve(resume_file)
            finally:
                self._signals = None

    def _solve(self, resume_file):
        if self._log:
            self._log.solving(self.net.name, self.param.lr_policy or "fixed")
        if resume_file:
            self.restore(resume_file)
        if self.elastic:
            from keras_caffe.distributed.elastic_solver import train_elastic

            train_elastic(self)
        else:
            self.step(self.param.max_iter - self.iter)
        p = self.param
        if p.snapshot_after_train and (not p.snapshot or self.iter % p.snapshot != 0) \
                and self._snapshot_iter != self.iter:
            self.snapshot()
        if self.stopped_early:
            if self._log:
                self._log.line("solver.cpp:311", "Optimization stopped early.")
            elif self._report:
                self._report.finished(self.iter, self.smoothed_loss, stopped=self.stopped_early)
            return
        if p.display and self.iter % p.display == 0:
            self._smoothed.update(self._extra_loss(), self.iter)
        final = self.smoothed_loss if p.display and self.iter % p.display == 0 else None
        if p.test_interval and self.iter % p.test_interval == 0:
            self.test_all()
        if self._log:
            self._log.finished(self.iter, final)
        elif self._report:
            self._report.finished(self.iter, self.smoothed_loss)

    def step(self, iters):
        """Run ``iters`` iterations: ``Solver::Step``."""
        p = self.param
        start = self.iter
        stop = start + int(iters)
        self._smoothed = SmoothedLoss(p.average_loss, start)
        report = self._progress_log()
        if report:
            report.begin(start)
        timer, last = time.perf_counter(), start
        while self.iter < stop:
            it = self.iter
            if p.test_interval and it % p.test_interval == 0 and (it > 0 or p.test_initialization):
                self.test_all()
                if self._act_on_signals():  # Caffe's Solver::Test looks during the test
                    break
            k = self._chunk(it, stop)
            with tf.device(self._device), pipeline_errors(), failures(lambda: f"iteration {it}"):
                losses, values = self._run(self._train_input(), tf.constant(k))
            losses, values = losses.numpy(), values.numpy()
            for i in range(k):
                self._smoothed.update(losses[i], it + i)
                if p.display and (it + i) % p.display == 0 and self._log:
                    now = time.perf_counter()
                    lapse = now - timer
                    self._log.iteration(it + i, (it + i - last) / (lapse or 1.0), lapse,
                                        p.display, self.smoothed_loss)
                    self._log.outputs("Train", list(zip(self._train_outputs.names, values[i],
                                                        self._train_outputs.weights)))
                    self._log.rate(it + i, self.optimizer.rate_at(it + i))
                    timer, last = now, it + i
            if report:
                report.update(self.iter, self.smoothed_loss, self.optimizer.rate_at(self.iter - 1))
            if self._act_on_signals(scheduled=bool(p.snapshot and self.iter % p.snapshot == 0)):
                break
            if self._on_commit is not None and self.iter % self.commit_every == 0:
                self._on_commit()

    def _progress_log(self):
        """The ``ProgressLog`` in progress mode (on rank 0), else None."""
        if self._progress and self._report is None:
            self._report = self._new_report()
        return self._report if self._progress else None

    def _new_report(self):
        """A ``ProgressLog``: off a terminal, a line per ``display`` iterations
        (per ``MAX_CHUNK`` without display), as Caffe's log has one."""
        return ProgressLog(self.param.max_iter, every=self.param.display or MAX_CHUNK)

    def _act_on_signals(self, scheduled=False):
        """Caffe's ``GetRequestedAction`` after an iteration or a test: write
        a snapshot if one is ``scheduled`` or a signal asks for one; True
        when a signal asks to stop."""
        request = self._signals.take() if self._signals is not None else NOTHING
        if self._signals is not None and self.distributed:
            request = agree(request)  # every worker, at the same point
        who = "+".join(request.signals) or "a signal to another worker"
        if request and self._log:
            self._log.info(f"{who}: {'stopping' if request.stop else 'snapshot'} at iteration "
                           f"{self.iter}")
        if scheduled or request.snapshot:
            self.snapshot()
        if request.stop:
            self.stopped_early = who
        return request.stop

    def _chunk(self, it, stop):
        """Iterations until the next point where Python must act: a display
        line, a test, a snapshot, or the end."""
        p = self.param
        ends = [stop, it + MAX_CHUNK]
        if p.display:
            ends.append((it // p.display) * p.display + (p.display if it % p.display else 0) + 1)
        for every in (p.test_interval, p.snapshot, self.commit_every if self.elastic else 0):
            if every:
                ends.append((it // every + 1) * every)
        return max(1, min(ends) - it)

    def _extra_loss(self):
        """The loss of one more batch (of each device's), for Caffe's last display."""
        with tf.device(self._device), pipeline_errors():
            losses = [float(self._train_outputs(next(stream), training=True)[0])
                      for stream in self._train_streams]
        return sum(losses) / len(losses)

    @property
    def smoothed_loss(self):
        """The loss Caffe prints: smoothed over ``average_loss`` iterations."""
        return self._smoothed.value

    # -- testing -------------------------------------------------------------------

    def test_all(self):
        """Test every test net (``Solver::TestAll``); returns one
        ``{output name: mean value}`` per test net."""
        results = [self.test(i) for i in range(len(self.test_nets))]
        self._tests_done += 1
        return results

    def test(self, index=0):
        """Share the train net's weights with test net ``index``, run its
        ``test_iter`` batches and average each output (``Solver::Test``)."""
        if self._log:
            self._log.testing(self.iter, index)
        for source, target in self._shared[index]:
            target.assign(source)
        count = self.param.test_iter[index]
        with tf.device(self._device), pipeline_errors():
            means = self._run_tests[index](self._test_streams[index], tf.constant(count)).numpy()
        outputs = self._test_outputs[index]
        if self._log:
            self._log.outputs("Test", list(zip(outputs.names, means, outputs.weights)))
        self._test_batches[index] += count
        result = dict(zip(outputs.names, (float(v) for v in means)))
        report = self._progress_log()
        if report:
            report.tested(self.iter, index, result)
        return result

    # -- snapshots -----------------------------------------------------------------

    def snapshot(self):
        """Write ``{snapshot_prefix}_iter_{N}`` weights and solver state;
        returns the written paths (None on workers other than rank 0, which
        write nothing)."""
        from keras_caffe.importers.snapshots.files import save_snapshot

        self._snapshot_iter = self.iter
        if not self.worker.is_chief:
            return None
        prefix = self.param.snapshot_prefix or os.path.splitext(str(self.source))[0]
        directory = os.path.dirname(os.path.abspath(prefix + "_"))
        os.makedirs(directory, exist_ok=True)
        files = save_snapshot(self.net, self.optimizer, prefix, self.iter,
                              format=self.snapshot_format, state=self._state())
        if self._log:
            self._log.snapshot(files.weights, files.solverstate, files.format)
        report = self._progress_log()
        if report:
            report.snapshotted(self.iter, files.weights, files.solverstate)
        return files

    def restore(self, path):
        """Resume from a ``.solverstate`` (ours, or Caffe's own): weights,
        optimizer state, iteration, and the data positions."""
        from keras_caffe.importers.snapshots.files import load_snapshot

        if self._log:
            self._log.restoring(path)

        def check(stored):  # before the snapshot changes anything
            solver_state.check(path, stored, len(self._tests), _STATE_VERSION)

        state = load_snapshot(path, self.net, self.optimizer, check_state=check)
        it = self.iter
        if state.get("version") == _STATE_VERSION:
            if state.get("seed") != self.seed:
                self.seed = state["seed"]
                self._train_pipes = self._train_pipelines()
                self._test_pipes = [self._pipeline(t, "TEST", (0, 1)) for t in self._tests]
            self._tests_done = state["tests_done"]
            restore_random_states(self.net, state.get("rng", {}))
            self._open_streams(state["train_batches"], state["test_batches"])
        else:  # Caffe's own snapshot: positions follow from the iteration
            p = self.param
            tests = 0
            if p.test_interval:
                tests = sum(1 for t in range(0, it, p.test_interval)
                            if t > 0 or p.test_initialization)
            self._tests_done = tests
            self._open_streams(it * p.iter_size, [tests * n for n in p.test_iter])
        if self.distributed and not self.elastic:  # rank 0's state everywhere, own RNG stream
            from keras_caffe.distributed import broadcast_state

            broadcast_state(self.net, self.optimizer)
        return state

    def _state(self):
        return {
            "version": _STATE_VERSION, "seed": self.seed, "net": self.net.name,
            "train_batches": self.iter * self.param.iter_size,
            "tests_done": self._tests_done, "test_batches": list(self._test_batches),
            "rng": random_states(self.net),
        }

    # -- building ------------------------------------------------------------------

    def _build_train_step(self):
        """The compiled train step for this world: with the gradient
        all-reduce when more than one worker runs."""
        if self._strategy is not None:  # several devices in this process
            self._run = mirrored_train_function(self._train_outputs, self.optimizer,
                                                self.param.iter_size, self._jit, self._strategy)
            return
        reduce = None
        if self.distributed:
            from keras_caffe.distributed import DistributedOptimizer

            reduce = DistributedOptimizer(self.optimizer).reduce_gradients
        self._run = train_function(self._train_outputs, self.optimizer, self.param.iter_size,
                                   self._jit, reduce=reduce)

    def _check_param(self):
        p = self.param
        if p.max_iter < 0:
            raise SolverError(self.source, f"max_iter must be >= 0, got {p.max_iter}")
        for field in ("display", "test_interval", "snapshot", "average_loss"):
            if getattr(p, field) < 0:
                raise SolverError(self.source, f"{field} must be >= 0, got {getattr(p, field)}")
        if any(n <= 0 for n in p.test_iter):
            raise SolverError(self.source, "every test_iter must be > 0")
        if p.iter_size < 1:
            raise SolverError(self.source, f"iter_size must be >= 1, got {p.iter_size}")

    def _scope(self):
        """The MirroredStrategy's scope with several devices; else nothing."""
        return self._strategy.scope() if self._strategy is not None else contextlib.nullcontext()

    def _train_input(self):
        """What the train function reads: one stream, or one per device."""
        return self._train_streams if self._strategy is not None else self._train_streams[0]

    def _choose_device(self):
        if self.devices:
            return self.devices[0]  # the first device runs the tests and holds the sum
        gpus = tf.config.list_logical_devices("GPU")
        if self.param.solver_mode == caffe_pb2.SolverParameter.GPU and gpus:
            index = self.param.device_id if self.param.HasField("device_id") else 0
            if index >= len(gpus):
                raise SolverError(self.source, f"device_id: {index}, but only {len(gpus)} "
                                               "GPU(s) are visible")
            return gpus[index].name
        return "/CPU:0" if not gpus or self.param.solver_mode == caffe_pb2.SolverParameter.CPU \
            else gpus[0].name

    def _find(self, path, field):
        """A net file named by ``field``: from the cwd (Caffe), then next to the solver."""
        from keras_caffe.importers.formats.paths import locate

        found = locate(path, self.source, exists=os.path.isfile)
        if found is not None:
            return found
        raise SolverError(self.source, f"{field}: net file {path!r} not found (looked in the "
                                       "current directory and next to the solver file)")

    def _net_sources(self):
        """(train, [(test, test_state)]) as Caffe's InitTrainNet/InitTestNets
        choose them; each a path or a NetParameter."""
        p = self.param
        given = [f for f in ("train_net_param", "train_net", "net_param", "net")
                 if p.HasField(f)]
        if not given:
            raise SolverError(self.source, "no train net: set one of train_net_param, "
                                           "train_net, net_param, net")
        if len(given) > 1:
            raise SolverError(self.source, f"several train nets ({', '.join(given)}); "
                                           "set only one")
        field = given[0]
        train = getattr(p, field) if field.endswith("_param") else self._find(getattr(p, field),
                                                                                field)
        generic = None
        if p.HasField("net_param"):
            generic = p.net_param
        elif p.HasField("net"):
            generic = self._find(p.net, "net")
        specific = list(p.test_net_param) + [self._find(f, "test_net") for f in p.test_net]
        if generic is None and len(p.test_iter) != len(specific):
            if not specific:
                raise SolverError(self.source, f"test_iter is set ({len(p.test_iter)} value(s)) "
                                               "but there is no test net: set test_net or net, "
                                               "or remove test_iter")
            raise SolverError(self.source, f"test_iter must be given once per test net: "
                                           f"{len(specific)} test net(s), {len(p.test_iter)} "
                                           "test_iter value(s)")
        if generic is not None and len(p.test_iter) < len(specific):
            raise SolverError(self.source, "test_iter must be specified for each test network")
        nets = specific + [generic] * (len(p.test_iter) - len(specific))
        if p.test_state and len(p.test_state) != len(nets):
            raise SolverError(self.source, f"test_state must be given once per test net "
                                           f"({len(nets)}), got {len(p.test_state)}")
        states = list(p.test_state) or [None] * len(nets)
        if p.test_interval and not nets:
            pass  # Caffe accepts test_interval without test nets and tests nothing
        return train, list(zip(nets, states))

    def _import(self, net, phase, state):
        from keras_caffe.importers.net.importing import import_net

        level = state.level if state is not None else 0
        stages = tuple(state.stage) if state is not None else ()
        if self._log:
            what = "training" if phase == "TRAIN" else "test"
            name = net if isinstance(net, str) else "net parameter"
            self._log.info(f"Creating {what} net from {name}",
                           "solver.cpp:102" if phase == "TRAIN" else "solver.cpp:190")
        imported = import_net(net, phase=phase, level=level, stages=stages,
                              data_format=self._data_format)
        if isinstance(net, str):
            imported.net_source = net
        else:
            imported.net_source = str(self.source)
        return imported

    def _attach_lms(self, lms):
        from keras_caffe.lms import policy as lms_module
        if lms is not None and not isinstance(lms, lms_module.LMS):
            raise KerasCaffeError(f"Solver: lms must be a keras_caffe.LMS or None, got {lms!r}")
        lms = lms if lms is not None else lms_module.current()
        if lms is None:
            return
        p = self.param
        state = p.train_state if p.HasField("train_state") else None
        lms_module.attach(self._train, lms, phase="TRAIN",
                          level=state.level if state is not None else 0,
                          stages=tuple(state.stage) if state is not None else (),
                          data_format=self._data_format, jit_compile=self._jit)

    def _make_optimizer(self, scale_lr, warmup_iters):
        from keras_caffe.importers.net.export import param_multipliers
        from keras_caffe.optimizers.from_solver import optimizer_from_solver

        lr_mult, decay_mult = param_multipliers(self.net)
        extra = {}
        if scale_lr and self.distributed:
            from keras_caffe.distributed import ScaledLearningRate
            from keras_caffe.schedules import schedule_from_param

            extra["learning_rate"] = ScaledLearningRate(
                schedule_from_param(self.param, self.source), workers=self.worker.size,
                warmup_steps=warmup_iters)
        return optimizer_from_solver(self.param, lr_mult=lr_mult, decay_mult=decay_mult, **extra)

    def _shared_variables(self, test_model):
        """(train variable, test variable) pairs: Caffe's test nets share the
        train net's blobs layer by layer, by name (``ShareTrainedLayersWith``)."""
        from keras_caffe.importers.net.importing import caffe_parts

        train_parts = caffe_parts(self.net)
        pairs = []
        for name, (layer, start, count, _) in caffe_parts(test_model).items():
            if name not in train_parts:
                continue
            source, s_start, s_count, _ = train_parts[name]
            targets = layer.caffe_variables()[start:start + count]
            sources = source.caffe_variables()[s_start:s_start + s_count]
            if len(targets) != len(sources) or any(
                    tuple(a.shape) != tuple(b.shape) for a, b in zip(sources, targets)):
                raise KerasCaffeError(f"{self.source}: layer {name!r} has different blobs in "
                                      "the train and test nets; they cannot share weights")
            pairs.extend(zip(sources, targets))
        return pairs

    def _pipeline(self, imported, phase, shard):
        from keras_caffe.importers.data.pipelines import net_pipeline

        return net_pipeline(imported.net, phase, net_source=imported.net_source,
                            data_format=self._data_format, seed=self.seed, arrays=self._arrays,
                            shard_index=shard[0], num_shards=shard[1])

    def _train_pipelines(self):
        """One training pipeline per device (device ``d`` of ``D`` reads
        batches ``d, d + D, ...``), or this worker's share under Horovod."""
        if self._strategy is None:
            return [self._pipeline(self._train, "TRAIN", self._shard)]
        count = len(self.devices)
        return [self._pipeline(self._train, "TRAIN", (d, count)) for d in range(count)]

    def _open_streams(self, train_batches, test_batches):
        """Open the data streams at these positions (each device's own
        batches for the training streams)."""
        self._train_streams = [iter(pipe.dataset(start_batch=train_batches))
                               for pipe in self._train_pipes]
        self._test_batches = list(test_batches)
        self._test_streams = [iter(pipe.dataset(start_batch=n))
                              for pipe, n in zip(self._test_pipes, self._test_batches)]


def _lms_current():
    from keras_caffe.lms import policy as lms_module
    return lms_module.current()


def _resolve_devices(devices):
    """``devices`` as the full names of TensorFlow's logical devices (``[]``
    for None); names that match no device raise ``ArgumentError`` naming
    them and the devices found."""
    if devices is None:
        return []
    if isinstance(devices, str) or not all(isinstance(d, str) for d in devices) or not devices:
        raise ArgumentError("Solver", "devices", f"must be a non-empty list of device names "
                                                 f"such as ['GPU:0', 'GPU:1'], got {devices!r}")
    found = {_device_key(d.name): d.name for d in tf.config.list_logical_devices()}
    missing = [d for d in devices if _device_key(d) not in found]
    if missing:
        raise ArgumentError("Solver", "devices", f"{', '.join(missing)}: no such device; "
                                                 f"devices found: {_found_text(found.values())}")
    resolved = [found[_device_key(d)] for d in devices]
    if len(set(resolved)) != len(resolved):
        raise ArgumentError("Solver", "devices", f"lists a device twice: {list(devices)}")
    return resolved


def _device_key(name):
    try:
        spec = tf.DeviceSpec.from_string(name if "/" in name else f"/device:{name}")
    except (ValueError, TypeError):
        return None
    return (spec.device_type or "").upper(), spec.device_index or 0


def _found_text(names):
    return ", ".join(n.split("device:")[-1] for n in names) or "none"


def _elastic_option(elastic, commit_every, shard_index, num_shards):
    if not isinstance(elastic, bool):
        raise KerasCaffeError(f"Solver: elastic must be True or False, got {elastic!r}")
    if commit_every is not None and (isinstance(commit_every, bool) or not isinstance(
            commit_every, int) or commit_every < 1):
        raise KerasCaffeError(f"Solver: commit_every must be an integer >= 1, got "
                              f"{commit_every!r}")
    if elastic and (shard_index is not None or num_shards is not None):
        raise KerasCaffeError("Solver: elastic training shards the data by the workers' ranks, "
                              "which change; do not give shard_index / num_shards")
    return elastic


def _single():
    from keras_caffe.distributed.context import Worker

    return Worker(0, 1, 0, 1, None)


def _with_max_iter(param, max_iter):
    """A copy of ``param`` with ``max_iter`` (the caller's message is left alone)."""
    copy = caffe_pb2.SolverParameter()
    copy.CopyFrom(param)
    copy.max_iter = max_iter
    return copy


def get_solver(path, **kwargs):
    """pycaffe's ``caffe.get_solver``: a ``Solver`` for a solver file."""
    return Solver(path, **kwargs)


def _names(names):
    return ", ".join(names) if names else "none"
