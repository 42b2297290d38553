"""One data-parallel ``model.fit`` run, for tests/distributed (run under horovodrun).

``python fit_worker.py OUT --optimizer sgd|adam|yellowfin|yellowfin-xla [--steps N] [--batch B]
[--reference] [--jit] [--no-broadcast] [--dropout] [--save-at K] [--resume PATH]
[--kill-rank R --kill-at N] [--elastic --commit-every K [--join-at J --join-file F]]``

Each worker trains a small CNN on its shard of a fixed synthetic data set
(``kd.shard`` of the samples, then batches of B) and writes
``OUT/rank{r}.npz``: final weights (w0, w1, ...), and per step the loss and,
for YellowFin, the tuned lr and momentum. ``--reference`` runs one process
without Horovod on all samples, batches of B (give it twice the workers' B).

``--elastic``: the training inside ``kd.elastic.run`` with a ``KerasState``
committed every K iterations (``ElasticCommit``); each (re)start prints
``synced rank r of P at iteration i: weights <checksum>``. Fault
injection: rank R (while more than one worker runs) SIGKILLs itself after
iteration N. ``--join-at J``: rank 0 of a one-worker world creates F (which
the test's host-discovery script then lists as a second host) after
iteration J and commits until the new worker has joined.
"""

import argparse
import os
import signal
import sys
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--optimizer", default="sgd")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--reference", action="store_true")
parser.add_argument("--jit", action="store_true")
parser.add_argument("--no-broadcast", action="store_true")
parser.add_argument("--dropout", action="store_true")
parser.add_argument("--snapshot-every", type=int, default=0)
parser.add_argument("--resume", default=None)
parser.add_argument("--width", type=int, default=8)
parser.add_argument("--kill-rank", type=int, default=-1)
parser.add_argument("--kill-at", type=int, default=-1)
parser.add_argument("--mixed", action="store_true")
parser.add_argument("--lms", action="store_true")
parser.add_argument("--iter-size", type=int, default=1)
parser.add_argument("--elastic", action="store_true")
parser.add_argument("--commit-every", type=int, default=5)
parser.add_argument("--join-at", type=int, default=-1)
parser.add_argument("--join-file", default=None)
args = parser.parse_args()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
import keras_caffe.distributed as kd  # noqa: E402
from keras_caffe.callbacks import (  # noqa: E402
    BroadcastGlobalState, CaffeSnapshot, MetricAverage, restore_snapshot)

if args.reference:
    keras.utils.set_random_seed(7)
    rank, size = 0, 1
else:
    me = kd.init(seed=7)
    rank, size = me.rank, me.size

rng = np.random.default_rng(0)
N = 4096
x = rng.normal(size=(N, 8, 8, 1)).astype("float32")
y = (x[:, :4].mean(axis=(1, 2, 3)) > 0).astype("int32")


def make_optimizer():
    if args.optimizer == "sgd":
        return keras_caffe.SGD(0.05, momentum=0.9, weight_decay=5e-4, iter_size=args.iter_size)
    if args.optimizer == "adam":
        return keras.optimizers.Adam(1e-3)
    if args.optimizer == "yellowfin":
        return keras_caffe.YellowFin(learning_rate=0.01)
    if args.optimizer == "yellowfin-xla":  # its update compiled by itself, after the all-reduce
        return keras_caffe.YellowFin(learning_rate=0.01, jit_compile=True)
    raise SystemExit(f"unknown optimizer {args.optimizer}")


if args.mixed:
    keras.mixed_precision.set_dtype_policy("mixed_float16")
width = args.width + (rank if os.environ.get("MISMATCH_RANK") == str(rank) else 0)
layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(width, 3, activation="relu"),
          keras.layers.Flatten()]
if args.dropout:
    layers.append(keras.layers.Dropout(0.3))
layers.append(keras.layers.Dense(2))
model = keras.Sequential(layers)
if args.lms:  # every activation recomputed on the backward pass
    keras_caffe.LMS(threshold_kb=0).apply(model)
optimizer = make_optimizer()
if args.mixed:  # the overflow check must see the reduced gradients
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
if not args.reference:
    optimizer = kd.DistributedOptimizer(optimizer)
model.compile(optimizer=optimizer, jit_compile=args.jit, auto_scale_loss=not args.mixed,
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def make_data(start):
    """This world's shard, batched, from batch ``start`` on."""
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if not args.reference:
        data = kd.shard(data)
    return data.batch(args.batch, drop_remainder=True).skip(start)


start = 0
if args.resume:
    restore_snapshot(model, args.resume)
    start = int(model.optimizer.iterations.numpy())

history = {"loss": [], "lr": [], "mu": []}


class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        opt = self.model.optimizer
        history["loss"].append(float(logs["loss"]))
        if args.optimizer.startswith("yellowfin") and not args.mixed:
            history["lr"].append(float(opt.tuned_learning_rate.numpy()))
            history["mu"].append(float(opt.tuned_momentum.numpy()))
        done = int(opt.iterations.numpy())
        if kd.rank() == args.kill_rank and kd.size() > 1 and done == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.elastic and kd.rank() == 0 and kd.size() == 1 and done == args.join_at:
            wait_for_joiner()


def wait_for_joiner():
    """List the second host, then commit until Horovod reports it (raises
    HostsUpdatedInterrupt out of fit); bounded: the test fails on a hang."""
    open(args.join_file, "w").close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state.commit()
        time.sleep(0.2)  # polls the launcher's notification; not a synchronisation
    raise SystemExit("no worker joined within 120 s")


callbacks = [] if (args.reference or args.no_broadcast) else [BroadcastGlobalState(), MetricAverage()]
callbacks.append(Record())
if args.snapshot_every:
    callbacks.append(CaffeSnapshot(os.path.join(args.out, "snap"), args.snapshot_every))


def fit(start):
    model.fit(make_data(start), epochs=1, steps_per_epoch=args.steps - start,
              callbacks=callbacks, verbose=0)


if args.elastic:
    from keras_caffe.callbacks import ElasticCommit
    from keras_caffe.distributed.elastic import KerasState, checksum, run

    state = KerasState(model)
    callbacks.append(ElasticCommit(state, every=args.commit_every))

    @run
    def train(state):
        done = int(model.optimizer.iterations.numpy())
        print(f"synced rank {kd.rank()} of {kd.size()} at iteration {done}: weights "
              f"{checksum(model)}", file=sys.stderr, flush=True)
        fit(done)

    train(state)
else:
    with kd.failures(lambda: f"iteration {int(model.optimizer.iterations.numpy())}"):
        fit(start)

rank, size = (0, 1) if args.reference else (kd.rank(), kd.size())
os.makedirs(args.out, exist_ok=True)
weights = {f"w{i}": v.numpy() for i, v in enumerate(model.weights)}
traffic = ([optimizer.allreduce_calls, optimizer.allreduce_bytes]
           if isinstance(optimizer, kd.DistributedOptimizer) else [0, 0])
np.savez(os.path.join(args.out, f"rank{rank}.npz"), iterations=int(model.optimizer.iterations.numpy()),
         traffic=np.array(traffic), loss=np.array(history["loss"]), lr=np.array(history["lr"]), mu=np.array(history["mu"]),
         **weights)
print(f"rank {rank} of {size} done", file=sys.stderr)
