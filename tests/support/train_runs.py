"""``keras-caffe train`` runs for the CLI tests: the installed CLI in a
subprocess (``train``) or in the test process (``train_in_process``, the same
output without a process's TensorFlow import), in a copy of a golden Caffe
folder, and a running one to signal.

A ``Running`` training is watched on one of its streams (stderr with ``--log
caffe``, stdout in progress mode) line by line: ``wait_for`` returns when a
line matches, so a test signals it at a known point of training, never after
a sleep. The other stream goes to a file (a full pipe would stop the child).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

#: A run's time limit (seconds): a hang fails the test.
TIMEOUT = 300
#: The max_iter of a run signalled to stop: not reached for seconds (an
#: iteration takes milliseconds), and a run the signal missed ends soon.
FOREVER = 3000
#: Keras's progress bar's colours.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: glog's prefix, for matching our Caffe log lines.
PREFIX = r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "


def golden_folder(golden, tmp_path, name, case="sgd_binaryproto"):
    """A copy of ``golden/snapshot/<case>`` (its data, init weights, net and
    solver: SGD, display 1, snapshot 10 to ``snap/run``) without its snapshots."""
    folder = tmp_path / name
    shutil.copytree(golden / "snapshot" / case, folder, ignore=shutil.ignore_patterns("snap"))
    return folder


def command(*args):
    return [sys.executable, "-m", "keras_caffe", "train", *map(str, args)]


def train(*args, cwd, expect=0):
    """A finished ``keras-caffe train`` (stdout and stderr captured)."""
    proc = subprocess.run(command(*args), capture_output=True, text=True, cwd=cwd,
                          timeout=TIMEOUT)
    assert proc.returncode == expect, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def train_in_process(*args, cwd, expect=0):
    """``train``'s CompletedProcess, the command run in this process
    (``cli_runner.run_cli``), with the same checks."""
    from support.cli_runner import run_cli

    proc = run_cli("train", *args, cwd=cwd)
    assert proc.returncode == expect, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


class Running:
    """``keras-caffe train`` running; ``watch``: ``"stderr"`` or ``"stdout"``."""

    def __init__(self, *args, cwd, watch="stderr"):
        self._other = tempfile.TemporaryFile("w+")
        pipes = {"stdout": self._other, "stderr": self._other, watch: subprocess.PIPE}
        self.proc = subprocess.Popen(command(*args), cwd=cwd, text=True, **pipes)
        self._watched = getattr(self.proc, watch)
        self.seen = []

    def wait_for(self, pattern):
        """Read the watched stream up to the first line matching ``pattern``
        (a regular expression); returns the match."""
        for line in self._watched:
            self.seen.append(line)
            for part in re.split(r"[\r\b]+", ANSI.sub("", line)):
                found = re.search(pattern, part)
                if found:
                    return found
        self.proc.kill()
        raise AssertionError(f"the run ended before {pattern!r}: {''.join(self.seen)[-3000:]}")

    def send(self, signum):
        self.proc.send_signal(signum)

    def finish(self):
        """(exit status, watched stream's text, the other stream's text)."""
        try:
            rest = self._watched.read()
            self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._other.seek(0)
        return self.proc.returncode, "".join(self.seen) + rest, self._other.read()


def plain_lines(text):
    """The lines of a progress-mode output, the bar's colours and redraws removed."""
    return [line for line in re.split(r"[\r\n\b]+", ANSI.sub("", text)) if line.strip()]


def messages(log):
    """The messages of Caffe's log lines (glog prefix removed)."""
    return [re.sub(PREFIX, "", line) for line in log.splitlines() if re.match(PREFIX, line)]


def snapshots(folder):
    """The iterations of the snapshots in ``folder/snap``, sorted."""
    names = os.listdir(folder / "snap") if (folder / "snap").is_dir() else []
    return sorted(int(m.group(1)) for n in names
                  for m in [re.fullmatch(r"run_iter_(\d+)\.caffemodel", n)] if m)


def blobs(path):
    """``{layer: [arrays]}`` of a caffemodel."""
    from keras_caffe.importers.net.weights import load_weights

    return {name: [np.asarray(b) for b in found] for name, found in load_weights(path).items()}


def assert_same_weights(a, b):
    """Bit for bit."""
    x, y = blobs(a), blobs(b)
    assert x.keys() == y.keys()
    for layer in x:
        assert len(x[layer]) == len(y[layer])
        for p, q in zip(x[layer], y[layer]):
            np.testing.assert_array_equal(p, q, err_msg=layer)
