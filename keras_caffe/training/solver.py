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

This module holds the loop; ``__init__`` runs the set-up as named steps
whose work lives beside it in ``keras_caffe.training``: ``solver_options``
(the arguments and the solver file's numbers, checked), ``placement``
(workers, devices, the MirroredStrategy), ``net_building`` (the train and
test nets, the weights they share, the optimizer), ``lms_attachment``,
``finetuning`` (``-weights``), ``solver_snapshots`` and ``resume_state``
(snapshot files and the positions they carry), ``progress`` (the output;
Caffe's log lines are ``keras_caffe.caffe_log``, shared with ``CaffeLogger``),
``signals``, ``step`` (the compiled steps).
"""

import os
import time

import keras
import tensorflow as tf

from keras_caffe.distributed import DistributedOptimizer, broadcast_state
from keras_caffe.distributed.faults import failures
from keras_caffe.distributed.state import broadcast_object
from keras_caffe.importers.data.pipelines import net_pipeline
from keras_caffe.importers.data.read_errors import pipeline_errors
from keras_caffe.kernels import pool_cpu_memory
from keras_caffe.training import (lms_attachment, net_building, placement, resume_state,
                                  solver_options, solver_snapshots)
from keras_caffe.caffe_log import CaffeLog, SmoothedLoss
from keras_caffe.training.finetuning import copy_weights
from keras_caffe.training.progress import ProgressLog
from keras_caffe.importers.snapshots.random_states import random_states, restore_random_states
from keras_caffe.training.signals import SIGHUP_EFFECT, SIGINT_EFFECT, SignalEffects, requested
from keras_caffe.training.step import (NetOutputs, mirrored_train_function, resolve_jit,
                                       test_function, train_function)

#: The most iterations one compiled call runs between two log/test/snapshot points.
MAX_CHUNK = 100


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
        uses_lms = lms_attachment.requested(lms)
        # effective when this is the first TensorFlow work in the process
        pool_cpu_memory(lms=uses_lms, start=True)
        solver_options.check_modes(log, distributed)
        self.param, self.source = solver_options.read_param(solver, max_iter)
        self.elastic = solver_options.elastic_option(elastic, commit_every, shard_index,
                                                     num_shards)
        self.commit_every = commit_every or self.param.display or self.param.snapshot or MAX_CHUNK
        self.stopped_early = None
        self._signals = None  # the SignalEffects while solve runs
        self._report = None  # the ProgressLog in progress mode
        self._snapshot_iter = None  # the iteration of this process's last snapshot
        self._on_commit = None  # set while elastic training runs
        self._join_workers(distributed, shard_index, num_shards, log, stream)
        solver_options.check_param(self.param, self.source)
        self._place(devices, uses_lms, jit_compile)
        self._data_format, self._arrays = data_format, arrays
        self._build_nets(lms, weights)
        self._build_optimizer(scale_lr, warmup_iters)
        self._open_data()
        self._share_rank0_state()
        self._build_steps()
        self.snapshot_format = solver_options.snapshot_format(snapshot_format, self.param)
        if self._log:
            self._log.scaffolding(self._device, self._jit, self.seed,
                                  placement.describe(self.worker, self.devices, self._strategy))

    # -- set-up, in __init__'s order -------------------------------------------------

    def _join_workers(self, distributed, shard_index, num_shards, log, stream):
        """This process among the workers: its share of the training data,
        and whether it logs (rank 0 alone does, as Caffe's root solver)."""
        self.worker = placement.choose_worker(distributed)
        self.distributed = self.worker.size > 1
        self._shard = placement.data_shard(self.worker, shard_index, num_shards)
        self._log_mode = log
        self._log = CaffeLog(stream, enabled=self.worker.is_chief) if log == "caffe" else None
        self._progress = log == "progress" and self.worker.is_chief

    def _place(self, devices, uses_lms, jit_compile):
        """The devices (a MirroredStrategy over several), the seed every
        worker shares, the device of the tests, XLA; Keras seeded."""
        self.devices, self._strategy = placement.mirrored_devices(devices, self.worker, uses_lms)
        p = self.param
        self.seed = p.random_seed if p.random_seed >= 0 else \
            int.from_bytes(os.urandom(4), "little") >> 1
        if self.distributed and not self.elastic:  # elastic: the first sync does it
            self.seed = broadcast_object(self.seed)  # one data order and init for all workers
        self._device = placement.main_device(p, self.source, self.devices)
        self._jit = resolve_jit(jit_compile)
        keras.utils.set_random_seed(self.seed)

    def _build_nets(self, lms, weights):
        """The train net (with LMS), the test nets, the weights to start from."""
        train, tests = net_building.net_sources(self.param, self.source)
        state = net_building.train_state(self.param)
        with self._scope():
            self._train = self._import(train, "TRAIN", state)
        self.net = self._train.model
        lms_attachment.attach(self._train, lms, state, data_format=self._data_format,
                              jit_compile=self._jit)
        self._train_outputs = NetOutputs(self.net)
        self._tests = [self._import(spec, "TEST", test_state) for spec, test_state in tests]
        self.test_nets = [t.model for t in self._tests]
        self._test_outputs = [NetOutputs(m) for m in self.test_nets]
        if weights:
            self.copy_from(weights)

    def _import(self, net, phase, state):
        """``net`` imported for ``phase``, with Caffe's "Creating ... net" line."""
        return net_building.import_for_phase(net, phase, state, source=self.source,
                                             data_format=self._data_format, log=self._log)

    def _build_optimizer(self, scale_lr, warmup_iters):
        """The solver file's optimizer, compiled into the train net; the
        variables each test net shares with it."""
        with self._scope():
            self.optimizer = net_building.make_optimizer(
                self.param, self.source, self.net, warmup_iters=warmup_iters,
                scaled_workers=self.worker.size if scale_lr and self.distributed else None)
            net_building.compile_train_net(self.net, self.optimizer, self._jit)
        self._shared = [net_building.shared_variables(self.net, m, self.source)
                        for m in self.test_nets]

    def _open_data(self):
        """The data pipelines, their streams open at the first batch."""
        self._train_pipes = self._train_pipelines()
        self._test_pipes = self._test_pipelines()
        self._tests_done = 0
        self._open_streams(train_batches=0, test_batches=[0] * len(self._tests))

    def _share_rank0_state(self):
        """Under Horovod, rank 0's weights and optimizer state on every
        worker (elastic training: its syncs do it)."""
        if self.distributed and not self.elastic:
            broadcast_state(self.net, self.optimizer)

    def _build_steps(self):
        """The compiled train and test steps, the smoothed loss."""
        self._build_train_step()
        self._run_tests = [test_function(o, self._jit) for o in self._test_outputs]
        self._smoothed = SmoothedLoss(self.param.average_loss, 0)

    def _build_train_step(self):
        """The compiled train step for this world: with the gradient
        all-reduce when more than one worker runs (elastic training
        rebuilds it when the workers change)."""
        if self._strategy is not None:  # several devices in this process
            self._run = mirrored_train_function(self._train_outputs, self.optimizer,
                                                self.param.iter_size, self._jit, self._strategy)
            return
        reduce = DistributedOptimizer(self.optimizer).reduce_gradients if self.distributed \
            else None
        self._run = train_function(self._train_outputs, self.optimizer, self.param.iter_size,
                                   self._jit, reduce=reduce)

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
        return copy_weights(self.net, weights, log=self._log, progress=self._progress)

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
            # Horovod only when elastic: distributed.elastic imports it on load
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
                self._log.stopped_early()
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
        request = requested(self._signals, self.distributed)  # every worker, at the same point
        if request and self._log:
            self._log.info(f"{request.who}: {'stopping' if request.stop else 'snapshot'} at "
                           f"iteration {self.iter}")
        if scheduled or request.snapshot:
            self.snapshot()
        if request.stop:
            self.stopped_early = request.who
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
        self._snapshot_iter = self.iter
        if not self.worker.is_chief:
            return None
        files = solver_snapshots.write(
            self.net, self.optimizer, solver_snapshots.snapshot_prefix(self.param, self.source),
            self.iter, format=self.snapshot_format, state=self._state())
        if self._log:
            self._log.snapshot(files.weights, files.solverstate, files.format)
        report = self._progress_log()
        if report:
            report.snapshotted(self.iter, files.weights, files.solverstate)
        return files

    def restore(self, path):
        """Resume from a ``.solverstate`` (ours, or Caffe's own): weights,
        optimizer state, iteration, and the data positions."""
        if self._log:
            self._log.restoring(path)
        state = solver_snapshots.read(path, self.net, self.optimizer, len(self._tests))
        if state.get("version") == resume_state.VERSION:
            if state.get("seed") != self.seed:  # the pipelines are functions of the seed
                self.seed = state["seed"]
                self._train_pipes = self._train_pipelines()
                self._test_pipes = self._test_pipelines()
            self._tests_done = state["tests_done"]
            restore_random_states(self.net, state.get("rng", {}))
            self._open_streams(state["train_batches"], state["test_batches"])
        else:  # Caffe's own snapshot: positions follow from the iteration
            self._tests_done, train_batches, test_batches = resume_state.caffe_positions(
                self.param, self.iter)
            self._open_streams(train_batches, test_batches)
        self._share_rank0_state()  # rank 0's state everywhere, own RNG stream
        return state

    def _state(self):
        """The resume state every snapshot carries."""
        return resume_state.make_state(
            seed=self.seed, net=self.net.name, train_batches=self.iter * self.param.iter_size,
            tests_done=self._tests_done, test_batches=self._test_batches,
            rng=random_states(self.net))

    # -- devices and data ----------------------------------------------------------

    def _scope(self):
        """The MirroredStrategy's scope with several devices; else nothing."""
        return placement.strategy_scope(self._strategy)

    def _train_input(self):
        """What the train function reads: one stream, or one per device."""
        return self._train_streams if self._strategy is not None else self._train_streams[0]

    def _pipeline(self, imported, phase, shard):
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

    def _test_pipelines(self):
        """One pipeline per test net, each reading all of its data."""
        return [self._pipeline(t, "TEST", (0, 1)) for t in self._tests]

    def _open_streams(self, train_batches, test_batches):
        """Open the data streams at these positions (each device's own
        batches for the training streams)."""
        self._train_streams = [iter(pipe.dataset(start_batch=train_batches))
                               for pipe in self._train_pipes]
        self._test_batches = list(test_batches)
        self._test_streams = [iter(pipe.dataset(start_batch=n))
                              for pipe, n in zip(self._test_pipes, self._test_batches)]


def get_solver(path, **kwargs):
    """pycaffe's ``caffe.get_solver``: a ``Solver`` for a solver file."""
    return Solver(path, **kwargs)
