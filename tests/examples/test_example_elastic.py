"""examples/horovod_elastic.py under a real elastic ``horovodrun`` (Gloo,
CPU, two "hosts" that are both this machine): rank 1 dies after iteration
110, rank 0 goes back to the commit at 100 and finishes alone.

Threshold: validation accuracy measured 0.818 after 240 iterations (100 with
2 workers, 140 with one; 8 classes, chance 0.125); required 0.6.
"""

import re

from support.horovod_jobs import check, discovery_script, horovodrun_elastic, require_horovod
from support import REPO

SCRIPT = REPO / "examples" / "horovod_elastic.py"


def test_a_killed_worker_is_dropped_and_the_run_finishes(tmp_path):
    require_horovod()
    hosts = discovery_script(tmp_path / "hosts.sh", "localhost:1", "127.0.0.1:1")
    out = check(horovodrun_elastic([SCRIPT, "--fail-rank", 1, "--fail-at", 110], hosts,
                                   cwd=tmp_path, timeout=300)).stdout
    worlds = re.findall(r"<stdout>:(\d) worker\(s\) from iteration (\d+)", out)
    assert worlds == [("2", "0"), ("1", "100")], out[-3000:]
    final = re.search(r"final: (\d+) iterations, (\d) worker\(s\), val_loss ([0-9.]+) "
                      r"val_accuracy ([0-9.]+)", out)
    assert final, out[-3000:]
    assert final.group(1, 2) == ("240", "1")
    assert float(final.group(4)) > 0.6, out[-3000:]
    written = sorted(p.name for p in (tmp_path / "elastic_snapshots").iterdir())
    assert written == ["cnn_iter_160.solverstate", "cnn_iter_160.weights.h5",
                       "cnn_iter_240.solverstate", "cnn_iter_240.weights.h5"]
