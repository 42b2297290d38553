"""YellowFin's closed loop against asynchronous workers: the claim and its check.

    python benchmarks/yellowfin_closed_loop.py [--workers 9] [--steps 2000] [--seeds 20]
                                               [--target 1e-3] [--check]

The real optimizer (``YellowFin(closed_loop=True, staleness=workers - 1)``
and the open loop, ``closed_loop=False``; float32, one XLA-compiled loop per
run) trains the 100-dimensional noisy quadratic of tests/support/yellowfin_async.py
(curvatures 1e-3 .. 1) with gradients computed at stale weights: ``workers``
asynchronous workers (staleness random, mean ``workers - 1``). Printed: the
quartiles of the updates each loop takes to reach ``target`` x the initial
loss on each seed (``steps``: never), on how many seeds the closed loop is
faster, and the float64 equations' closed loop on the same seeds.

The claim (9 workers, 20 seeds, 2000 updates, target 1e-3): in the open loop
the staleness adds momentum; the closed loop removes it and wins: its median
below 0.8 x the open loop's, faster on at least 80% of the seeds, reaching
the target wherever the open loop does, every run finite, the loop still
removing momentum at the end (mu < mu*), and its median within 15% of the
float64 equations'. ``--check`` (``make verify-claims``) prints each
failure of ``yellowfin_async.claim_failures`` and exits 1; 0 when the claim
holds. The experiment lives in tests/support/yellowfin_async.py
(tests/optimizers/test_yellowfin_closed_loop.py runs it at a tiny size as a smoke
test). Claim, command and last results: docs/claims.md.
"""

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import numpy as np  # noqa: E402

import yellowfin_async as experiment  # noqa: E402
import yellowfin_tasks  # noqa: E402  (the machine line)


def quartiles(hits):
    q = np.percentile(hits, [25, 50, 75])
    return f"{q[1]:6.0f} [{q[0]:.0f}, {q[2]:.0f}]"


def report(results, steps):
    """The lines printed for ``experiment.async_runs``'s results."""
    open_hits, closed_hits = results["open"][:, 0], results["closed"][:, 0]
    return [
        f"updates to target, median [quartiles] over {len(open_hits)} seeds "
        f"({steps}: never reached)",
        f"  open loop (real optimizer)      {quartiles(open_hits)}",
        f"  closed loop (real optimizer)    {quartiles(closed_hits)}   "
        f"closed / open median {np.median(closed_hits) / np.median(open_hits):.3f}",
        f"  closed loop (float64 equations) {quartiles(results['reference'])}",
        f"  closed faster on {int(np.sum(closed_hits < open_hits))}/{len(open_hits)} seeds; "
        f"open reached the target on {int(np.sum(open_hits < steps))}, closed on "
        f"{int(np.sum(closed_hits < steps))}",
        f"  at the end of the last closed-loop run: mu {results['momentum']:.4f}, "
        f"mu* {results['target_momentum']:.4f}",
        "  per seed (open, closed): " + " ".join(
            f"{a:.0f}/{b:.0f}" for a, b in zip(open_hits, closed_hits)),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = experiment.CLAIM
    parser.add_argument("--workers", type=int, default=defaults["workers"])
    parser.add_argument("--steps", type=int, default=defaults["steps"])
    parser.add_argument("--seeds", type=int, default=defaults["seeds"],
                        help="seeds 0 .. N-1")
    parser.add_argument("--target", type=float, default=defaults["target"],
                        help="a loss relative to the initial loss")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the claim holds (yellowfin_async.claim_failures)")
    args = parser.parse_args(argv)
    if args.workers < 2 or args.steps < 1 or args.seeds < 1 or not 0 < args.target < 1:
        parser.error("--workers >= 2, --steps >= 1, --seeds >= 1, 0 < --target < 1")
    print(f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
          f"{yellowfin_tasks.machine()}")
    print(f"{args.workers} asynchronous workers (staleness mean {args.workers - 1}), "
          f"{args.steps} updates, target {args.target:g} x the initial loss", flush=True)
    start = time.perf_counter()
    results = experiment.async_runs(args.workers, args.steps, args.seeds, args.target)
    print(*report(results, args.steps), sep="\n")
    print(f"total {time.perf_counter() - start:.0f} s; load average "
          + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    if not args.check:
        return 0
    failures = experiment.claim_failures(results, args.steps)
    for line in failures:
        print(f"CLAIM FAILS: {line}")
    print(f"claim {'FAILS' if failures else 'holds'}: {args.seeds} seeds, {args.workers} "
          f"workers, {args.steps} updates")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
