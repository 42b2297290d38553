"""Elastic data-parallel training: a worker that dies is dropped, the others carry on.

    horovodrun -np 2 --min-np 1 --max-np 2 --host-discovery-script ./hosts.sh \\
        python examples/horovod_elastic.py [--fail-rank 1 --fail-at 110]

    hosts.sh prints the hosts and their slots, one a line; on one machine two
    names of it do (Horovod runs both locally):
        #!/bin/sh
        echo localhost:1
        echo 127.0.0.1:1

    [--iterations 240] [--batch 32] [--commit-every 20] [--display 40] [--seed 0]
    [--snapshot-prefix elastic_snapshots/cnn]

The pattern (``keras_caffe.distributed.elastic``, Horovod's elastic protocol
for Keras 3):

- ``state = kd.elastic.KerasState(model)``: the model's and optimizer's
  variables (the iteration counter among them), committed in host memory.
- ``@kd.elastic.run`` on the training function: it starts after a sync
  (rank 0's state everywhere) and runs again after each reset: a lost
  worker sends the survivors back to the last commit, a new host (listed by
  the discovery script) adds a worker that starts from rank 0's state.
- Inside, everything that depends on the world: the shard
  (``kd.shard(...)`` reads ``kd.rank()`` / ``kd.size()`` now) and the
  position (``skip`` the iterations already done, read from the restored
  optimizer).
- ``ElasticCommit(state, every=N)`` commits every N iterations: a failure
  costs at most N iterations. ``CaffeLogger`` and ``CaffeSnapshot`` write
  on whichever worker is rank 0 now.

The rate stays ``--lr`` whatever the number of workers (the global batch is
``P x --batch``). ``--fail-rank R --fail-at N``: rank R SIGKILLs itself after
iteration N (while more than one worker runs), to watch the recovery:
with ``--fail-rank 1 --fail-at 110`` rank 0 prints ``2 worker(s) from
iteration 0``, then ``1 worker(s) from iteration 100`` (the last commit),
and finishes alone. About 30 s on two busy CPU cores. Data and
net: examples/horovod_train.py's gratings and CNN.
"""

import argparse
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
import keras_caffe.distributed as kd  # noqa: E402
from keras_caffe.callbacks import CaffeLogger, CaffeSnapshot, ElasticCommit  # noqa: E402

from horovod_train import cnn, gratings  # noqa: E402  (the example next to this one)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=240)
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch")
    parser.add_argument("--samples", type=int, default=4096, help="training images")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--commit-every", type=int, default=20)
    parser.add_argument("--display", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--snapshot-prefix", default="elastic_snapshots/cnn")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at", type=int, default=-1)
    args = parser.parse_args(argv)
    for name in ("iterations", "batch", "samples", "commit_every", "display"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, name)}")
    return args


class FailAt(keras.callbacks.Callback):
    """Rank ``rank`` dies (SIGKILL) after iteration ``at``, while others run."""

    def __init__(self, rank, at):
        super().__init__()
        self.rank, self.at = rank, at

    def on_train_batch_end(self, batch, logs=None):
        done = int(self.model.optimizer.iterations.numpy())
        if kd.rank() == self.rank and kd.size() > 1 and done == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv=None):
    args = parse_args(argv)
    try:
        kd.init(seed=args.seed)
        elastic = kd.elastic
    except kd.HorovodUnavailableError as err:
        print(err, file=sys.stderr)
        return 1
    x, y = gratings(args.samples, args.seed)
    x_val, y_val = gratings(args.samples // 4, args.seed + 1)

    model = cnn()
    optimizer = kd.DistributedOptimizer(keras_caffe.SGD(args.lr, momentum=0.9,
                                                        weight_decay=5e-4))
    model.compile(optimizer=optimizer, jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    state = elastic.KerasState(model)
    snapshots = CaffeSnapshot(args.snapshot_prefix, args.commit_every * 4, keep=2)
    callbacks = [FailAt(args.fail_rank, args.fail_at), CaffeLogger(display=args.display),
                 snapshots, ElasticCommit(state, every=args.commit_every)]

    @elastic.run
    def train(state):
        done = int(optimizer.iterations.numpy())  # the committed position
        if kd.is_chief():
            print(f"{kd.size()} worker(s) from iteration {done}", flush=True)
        data = (kd.shard(tf.data.Dataset.from_tensor_slices((x, y)))  # this world's shard
                .shuffle(len(x) // kd.size(), seed=args.seed).repeat()
                .batch(args.batch, drop_remainder=True).skip(done))
        model.fit(data, epochs=1, steps_per_epoch=args.iterations - done,
                  callbacks=callbacks, verbose=0)

    train(state)
    if kd.is_chief():
        loss, accuracy = model.evaluate(x_val, y_val, batch_size=256, verbose=0)
        print(f"final: {int(optimizer.iterations.numpy())} iterations, {kd.size()} worker(s), "
              f"val_loss {loss:.4f} val_accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
