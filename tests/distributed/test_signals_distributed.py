"""A signal to one Horovod worker stops all of them: ``horovodrun -np 2
keras-caffe train``, SIGINT to rank 1 only (the worker that neither logs nor
snapshots). At each look the workers all-reduce their requests, so both stop
after the same iteration: rank 0 writes the snapshot and logs the stop,
nobody waits in an all-reduce the other never joins, and the job exits 0."""

import re
import signal
import subprocess

from support.horovod_jobs import environment, horovodrun_exe, note_launch, require_horovod
from support.train_runs import FOREVER, TIMEOUT, command, golden_folder, snapshots


def worker(launcher, rank):
    """The ``keras_caffe`` process of ``rank`` under the ``horovodrun`` process."""
    import psutil

    found = [p for p in psutil.Process(launcher.pid).children(recursive=True)
             if p.environ().get("HOROVOD_RANK") == str(rank)
             and "keras_caffe" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


def test_sigint_to_one_worker_stops_every_worker(golden, tmp_path):
    require_horovod()
    folder = golden_folder(golden, tmp_path, "hvd")
    note_launch("horovodrun")
    launcher = subprocess.Popen(
        [horovodrun_exe(), "-np", "2", "-H", "localhost:2", "--gloo",
         *command("--solver", "solver.prototxt", "--max-iter", FOREVER, "--log-format", "caffe")],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=environment())
    try:
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if re.search(r"^\[0\]<stderr>:.*\] Iteration 3 \(", line):
                break
        worker(launcher, 1).send_signal(signal.SIGINT)
        out = "".join(seen) + launcher.stdout.read()
        status = launcher.wait(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert status == 0, out[-4000:]
    stops = re.findall(r"\] a signal to another worker: stopping at iteration (\d+)", out)
    assert len(stops) == 1, out[-4000:]  # rank 0 logs; rank 1 stopped at the same look
    n = int(stops[0])
    assert 3 < n < FOREVER and "Optimization stopped early." in out
    assert "Optimization Done." not in out and "Traceback" not in out
    assert f"Snapshotting to binary proto file snap/run_iter_{n}.caffemodel" in out
    assert snapshots(folder) == sorted({*range(10, n + 1, 10), n})
