"""What data parallelism costs per step: ``horovodrun -np 2`` against one process.

    python benchmarks/allreduce_overhead.py [--batch 32] [--steps 20] [--warmup 5]
                                            [--threads 1] [--nets cifar_quick,resnet20,mlp60]

Needs Horovod (``keras-caffe install-horovod``; ``make bench-horovod`` builds it in .venv). One run
launches ``horovodrun -np 2 -H localhost:2 --gloo`` and then a single
process (np=1, where ``DistributedOptimizer`` reduces nothing) on the same
per-worker batch, for three nets:

- ``cifar_quick``: Caffe's ``examples/cifar10/cifar10_quick`` (3 conv 5x5 +
  2 InnerProduct, 10 parameter blobs, 0.15M parameters);
- ``resnet20``: He et al.'s CIFAR ResNet-20 (BatchNorm, 0.27M parameters,
  61 trainable variables);
- ``mlp60``: 60 Dense(64) layers (120 small variables): many layers, few bytes.

and prints, per net:

- collectives issued per step: the Horovod ops in the traced train step
  (forward, gradients, ``DistributedOptimizer.apply``) with ``grouped=True``
  (goal: 1 whatever the number of layers) and ``grouped=False`` (one per
  variable);
- fused all-reduces per step that Horovod actually ran, from its timeline
  (``HOROVOD_TIMELINE=DYNAMIC``, rank 0; overlapping ``GLOO_ALLREDUCE``
  spans of the tensors counted as one execution of the fusion buffer);
- bytes all-reduced per step: the gradients' size in float32 and with
  ``compression="fp16"``; a ring all-reduce sends ``2 (P - 1) / P`` times
  that per worker (= the size for P = 2);
- the median step time with np=1 and np=2 and their ratio (weak scaling:
  the same batch per worker, so 1.0 is free data parallelism), and np=2
  with ``grouped=False`` and with fp16 compression.

It also prints, per update of ``SGD(iter_size=k)`` with k = 1 and 4, the
bytes each worker all-reduces and the fused all-reduces run, reducing once
per update against once per micro-batch; and the np=2 step against the same
two workers as one process under ``tf.distribute.MirroredStrategy`` on two
logical CPU devices (``keras-caffe train --cpu-devices 2 --devices
CPU:0,CPU:1``).

Every worker runs TensorFlow with ``--threads`` intra-op threads (default 1),
so np=2 on a 2-core machine gives each worker one core, as np=1 has: the
ratio then measures the all-reduce and the synchronisation, not two
processes competing for cores. Timings use a ``tf.function`` step without
XLA (Horovod's ops have no XLA kernel), as ``fit`` runs under
``BroadcastGlobalState``.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

NETS = ("cifar_quick", "resnet20", "mlp60")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # output folder of a worker run
    parser.add_argument("--mirrored", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.nets = [n for n in args.nets.split(",") if n]
    unknown = sorted(set(args.nets) - set(NETS))
    if unknown:
        parser.error(f"--nets: unknown {', '.join(unknown)} (known: {', '.join(NETS)})")
    for name in ("batch", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


# -- the nets ----------------------------------------------------------------------------------

def build(name):
    import keras

    if name == "cifar_quick":
        inputs = keras.Input((32, 32, 3))
        x = keras.layers.Conv2D(32, 5, padding="same", name="conv1")(inputs)
        x = keras.layers.ReLU()(keras.layers.MaxPooling2D(3, 2, padding="same")(x))
        x = keras.layers.Conv2D(32, 5, padding="same", activation="relu", name="conv2")(x)
        x = keras.layers.AveragePooling2D(3, 2, padding="same")(x)
        x = keras.layers.Conv2D(64, 5, padding="same", activation="relu", name="conv3")(x)
        x = keras.layers.AveragePooling2D(3, 2, padding="same")(x)
        x = keras.layers.Dense(64, name="ip1")(keras.layers.Flatten()(x))
        return keras.Model(inputs, keras.layers.Dense(10, name="ip2")(x), name=name), (32, 32, 3)
    if name == "resnet20":
        from bench_nets import resnet20

        return resnet20(), (32, 32, 3)
    layers = [keras.Input((64,))] + [keras.layers.Dense(64, activation="relu") for _ in range(59)]
    return keras.Sequential(layers + [keras.layers.Dense(10)], name=name), (64,)


# -- one worker ---------------------------------------------------------------------------------

def op_counts(graph):
    graph_def = graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph_def.node)
    for function in graph_def.library.function:
        counts.update(node.op for node in function.node_def)
    return sum(n for op, n in counts.items() if op.startswith("Horovod"))


def fused_executions(path):
    """(fused all-reduce executions, tensors reduced) in a Horovod timeline:
    the GLOO_ALLREDUCE spans of all tensors, overlapping spans merged."""
    text = Path(path).read_text().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    stacks, spans = collections.defaultdict(list), []
    for event in events:
        if event.get("ph") == "B":
            stacks[event["pid"]].append((event["name"], event["ts"]))
        elif event.get("ph") == "E" and stacks[event["pid"]]:
            name, start = stacks[event["pid"]].pop()
            if name == "GLOO_ALLREDUCE":
                spans.append((start, event["ts"]))
    clusters, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            clusters += 1
            end = stop
        else:
            end = max(end, stop)
    return clusters, len(spans)


def median_time(run, args, warmup=None):
    """The median of ``args.steps`` timed calls of ``run()``, after
    ``warmup`` (default ``args.warmup``) untimed ones."""
    for _ in range(args.warmup if warmup is None else warmup):
        run()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_mirrored(args):
    """The grouped SGD step of each net under MirroredStrategy on two logical
    CPU devices in one process, each replica on the per-worker batch (what
    ``keras-caffe train --cpu-devices 2 --devices CPU:0,CPU:1`` runs);
    ``--threads`` intra-op threads per replica."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    tf.config.threading.set_intra_op_parallelism_threads(2 * args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2 * args.threads)
    import keras
    import numpy as np

    import keras_caffe

    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    out = Path(args.worker)
    out.mkdir(parents=True, exist_ok=True)
    report = {"nets": {}}
    for net in args.nets:
        with strategy.scope():
            model, shape = build(net)
            optimizer = keras_caffe.SGD(0.001, momentum=0.9)
            optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="sum_over_batch_size")
        data = []
        for rank in range(2):  # each replica's batch, as worker `rank` of np=2 draws it
            rng = np.random.default_rng(rank)
            data.append((rng.normal(size=(args.batch, *shape)).astype("float32"),
                         rng.integers(0, 10, args.batch).astype("int32")))
        x = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(data[ctx.replica_id_in_sync_group][0]))
        y = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(data[ctx.replica_id_in_sync_group][1]))

        @tf.function
        def step(x, y):
            def replica(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True)) / 2.0
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply(grads, model.trainable_variables)
                return loss
            return strategy.reduce("SUM", strategy.run(replica, args=(x, y)), axis=None)

        report["nets"][net] = {"time": median_time(lambda: float(step(x, y)), args)}
    (out / "report.json").write_text(json.dumps(report))


def run_worker(args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras
    import numpy as np

    import keras_caffe
    import keras_caffe.distributed as kd

    me = kd.init(seed=0)
    timeline = me.size > 1 and os.environ.get("HOROVOD_TIMELINE") == "DYNAMIC"
    if timeline:
        import horovod.tensorflow as hvd
    out = Path(args.worker)
    out.mkdir(parents=True, exist_ok=True)
    variants = {"grouped": {}}
    if me.size > 1:
        variants.update({"ungrouped": {"grouped": False}, "fp16": {"compression": "fp16"}})
    report = {"size": me.size, "nets": {}}
    for net in args.nets:
        model, shape = build(net)
        rng = np.random.default_rng(me.rank)
        x = tf.constant(rng.normal(size=(args.batch, *shape)).astype("float32"))
        y = tf.constant(rng.integers(0, 10, args.batch).astype("int32"))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        sizes = [int(np.prod(v.shape)) for v in model.trainable_variables]
        entry = {"variables": len(sizes), "parameters": sum(sizes), "ops": {}, "time": {},
                 "fused": {}}
        for variant, options in variants.items():
            optimizer = kd.DistributedOptimizer(keras_caffe.SGD(0.001, momentum=0.9), **options)
            optimizer.build(model.trainable_variables)

            @tf.function
            def step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply(grads, model.trainable_variables)
                return loss

            entry["ops"][variant] = op_counts(step.get_concrete_function(x, y).graph)
            entry["time"][variant] = median_time(lambda: float(step(x, y)), args)
            if timeline:
                steps = 5
                path = out / f"timeline_{net}_{variant}.json"
                if me.rank == 0:
                    hvd.start_timeline(str(path))
                for _ in range(steps):
                    float(step(x, y))
                if me.rank == 0:
                    hvd.stop_timeline()
                    executions, tensors = fused_executions(path)
                    entry["fused"][variant] = [executions / steps, tensors / steps]
        if me.size > 1:
            entry["iter_size"] = iter_size_traffic(args, model, x, y, loss_fn, me,
                                                   hvd if timeline else None, out, net)
        report["nets"][net] = entry
    if me.rank == 0:
        (out / "report.json").write_text(json.dumps(report))


def iter_size_traffic(args, model, x, y, loss_fn, me, hvd, out, net):
    """Per update of ``SGD(iter_size=k)``, k = 1 and 4: bytes all-reduced
    (``DistributedOptimizer.allreduce_bytes``), fused all-reduces run (the
    timeline) and time, once per update (``DistributedOptimizer.apply``)
    and, for comparison, once per micro-batch (the inner optimizer fed
    reduced micro-batch gradients, as before issue 16)."""
    import tensorflow as tf

    import keras_caffe
    import keras_caffe.distributed as kd

    results = {}
    for k in (1, 4):
        for mode in ("per_update", "per_pass") if k > 1 else ("per_update",):
            optimizer = kd.DistributedOptimizer(keras_caffe.SGD(0.001, momentum=0.9, iter_size=k))
            optimizer.build(model.trainable_variables)
            inner = optimizer.inner_optimizer

            @tf.function
            def micro_batch(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                if mode == "per_update":
                    optimizer.apply(grads, model.trainable_variables)
                else:
                    inner.apply(optimizer.reduce_gradients(grads), model.trainable_variables)
                return loss

            def update():
                for _ in range(k):
                    float(micro_batch(x, y))

            for _ in range(args.warmup):
                update()
            before = optimizer.allreduce_bytes
            took = median_time(update, args, warmup=0)
            entry = {"bytes": (optimizer.allreduce_bytes - before) / args.steps, "time": took}
            if hvd is not None:
                updates = 3
                path = out / f"timeline_{net}_iter{k}_{mode}.json"
                if me.rank == 0:
                    hvd.start_timeline(str(path))
                for _ in range(updates):
                    update()
                if me.rank == 0:
                    hvd.stop_timeline()
                    entry["fused"] = fused_executions(path)[0] / updates
            results[f"{k}_{mode}"] = entry
    return results


# -- the launcher -------------------------------------------------------------------------------

def launch(args, folder, np_):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONWARNINGS="ignore", HOROVOD_TIMELINE="DYNAMIC")
    flags = [__file__, "--worker", str(folder), "--batch", str(args.batch), "--steps",
             str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
             "--nets", ",".join(args.nets)]
    if np_ == "mirrored":
        command = [sys.executable, *flags, "--mirrored"]
    elif np_ == 1:
        command = [sys.executable, *flags]
    else:
        horovodrun = str(Path(sys.executable).parent / "horovodrun")
        command = [horovodrun, "-np", str(np_), "-H", f"localhost:{np_}", "--gloo",
                   sys.executable, *flags]
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, timeout=1200)
    if result.returncode != 0:
        sys.exit(f"np={np_} failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
    report = json.loads((folder / "report.json").read_text())
    report["wall"] = time.perf_counter() - start
    return report


def table(args, one, two):
    cores = os.cpu_count()
    print(f"allreduce overhead: horovodrun -np 2 --gloo (CPU) vs one process; per-worker batch "
          f"{args.batch}; median of {args.steps} steps after {args.warmup}; {args.threads} "
          f"intra-op thread(s) per worker on a {cores}-core machine (np=2 runs both workers "
          "on these cores at once)")
    print()
    print(f"{'net':<12} {'vars':>5} {'params':>8} | {'Horovod ops/step':>16} | "
          f"{'fused allreduces/step':>21} | {'bytes/step':>19}")
    print(f"{'':<12} {'':>5} {'':>8} | {'grouped':>7} {'ungroup':>8} | {'grouped':>10} "
          f"{'ungroup':>10} | {'fp32':>9} {'fp16':>9}")
    for net in args.nets:
        entry = two["nets"][net]
        fused = entry["fused"]

        def f(variant):
            if variant not in fused:
                return "n/a"
            return f"{fused[variant][0]:g} ({fused[variant][1]:g}t)"

        params = entry["parameters"]
        print(f"{net:<12} {entry['variables']:>5} {params:>8} | {entry['ops']['grouped']:>7} "
              f"{entry['ops']['ungrouped']:>8} | {f('grouped'):>10} {f('ungrouped'):>10} | "
              f"{params * 4:>9} {params * 2:>9}")
    print()
    print(f"{'net':<12} | {'step np=1':>10} {'step np=2':>10} {'ratio':>6} | "
          f"{'np=2 ungrouped':>14} {'np=2 fp16':>10}")
    for net in args.nets:
        t1 = one["nets"][net]["time"]["grouped"] * 1e3
        t2 = two["nets"][net]["time"]
        grouped = t2["grouped"] * 1e3
        print(f"{net:<12} | {t1:>8.2f}ms {grouped:>8.2f}ms {grouped / t1:>6.2f} "
              f"| {t2['ungrouped'] * 1e3:>12.2f}ms {t2['fp16'] * 1e3:>8.2f}ms")
    print()
    print(f"per update with iter_size k (np=2, per-worker micro-batch {args.batch}): bytes each "
          "worker hands to all-reduce, fused all-reduces run (timeline), median time; 'once' "
          "is DistributedOptimizer (the sum of the k micro-batches reduced once), 'per pass' "
          "reduces every micro-batch")
    print(f"{'net':<12} | {'k=1 bytes':>10} {'fused':>5} {'time':>9} | {'k=4 once bytes':>14} "
          f"{'fused':>5} {'time':>9} | {'k=4 per pass':>13} {'fused':>5} {'time':>9}")
    for net in args.nets:
        its = two["nets"][net]["iter_size"]

        def cells(key, width):
            e = its[key]
            return (f"{e['bytes']:>{width}.0f} {e.get('fused', float('nan')):>5g} "
                    f"{e['time'] * 1e3:>7.1f}ms")
        print(f"{net:<12} | {cells('1_per_update', 10)} | {cells('4_per_update', 14)} | "
              f"{cells('4_per_pass', 13)}")
    print()
    print("Horovod ops/step: in the traced train step (np=1 has none: one worker reduces "
          "nothing). fused allreduces/step: from Horovod's timeline on rank 0, (Nt) = tensors "
          "reduced per step. bytes/step: the gradients all-reduced per step; a ring sends "
          "2(P-1)/P of it per worker. "
          f"Launch + run wall time: np=2 {two['wall']:.0f} s, np=1 {one['wall']:.0f} s.")


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        (run_mirrored if args.mirrored else run_worker)(args)
        return
    with tempfile.TemporaryDirectory() as folder:
        two = launch(args, Path(folder) / "np2", 2)
        one = launch(args, Path(folder) / "np1", 1)
        mirrored = launch(args, Path(folder) / "mirrored", "mirrored")
    table(args, one, two)
    print()
    print("two workers on one machine, per step (the same per-worker batch): Horovod np=2 "
          "(two processes, Gloo) against MirroredStrategy (one process, two logical CPU "
          "devices, keras_caffe.SGD's one sum per update)")
    print(f"{'net':<12} | {'Horovod np=2':>12} {'Mirrored':>10} {'Mirrored/Horovod':>17}")
    for net in args.nets:
        hvd_time = two["nets"][net]["time"]["grouped"] * 1e3
        mirror = mirrored["nets"][net]["time"] * 1e3
        print(f"{net:<12} | {hvd_time:>10.2f}ms {mirror:>8.2f}ms {mirror / hvd_time:>17.2f}")


if __name__ == "__main__":
    main()
