"""YellowFin's "no tuning" claim: the table for the issue note, and its check.

    python benchmarks/yellowfin_no_tuning.py [--steps 1000] [--batch 32] [--samples N]
                                             [--seeds 0,1,2] [--tasks cnn lstm]
                                             [--yf lr_factor=2 ...] [--check]

On each task (a small CNN on seeded Gabor-patch images, a small LSTM on a
seeded order-2 Markov chain), trains ``keras_caffe.YellowFin()`` with its
defaults, momentum SGD (mu 0.9) at lr 0.001, 0.01, 0.1, 1 and Adam at lr
1e-4, 1e-3, 1e-2, from the same initial weights on the same batches (XLA),
and prints each run's training loss (the mean over the last tenth of the
steps), YellowFin's final rate and momentum, and whether YellowFin is within
10% of each family's best (``yf <= 1.1 * best``). The experiment is
tests/support/yellowfin_tasks.py (tests/optimizers/test_yellowfin_no_tuning.py runs it at a tiny
size as a smoke test). ``--yf NAME=VALUE`` passes arguments to YellowFin (to
see what it would take where the defaults fall short; the claim is about the
defaults).

``--check`` (``make verify-claims``: ``--seeds 0,1,2 --check`` at the default
size) makes the claim a check: after the tables, every failure of
``yellowfin_tasks.claim_failures`` on every task and seed (YellowFin within
10% of each family's best; the task learned, below 0.6 x chance, and needing
tuning, a grid rate above 0.95 x chance; YellowFin's rate above 1e-3 and its
momentum in (0.05, 1) at the end of each tenth) is printed and the exit status
is 1; 0 when the claim holds everywhere. Claim, command and last results:
docs/claims.md.
"""

import argparse
import datetime
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402
import yellowfin_tasks as experiment  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=130)  # a note-wide table
TASKS = {"cnn": experiment.cnn_task, "lstm": experiment.lstm_task}


def loss_text(run):
    return "diverged" if run.diverged else f"{run.loss:.4f}"


def task_table(task, runs):
    verdict = experiment.verdict(runs)
    best = {id(run) for run in verdict.best.values() if run is not None}
    floor = f", floor (true chain) {task.floor:.4f}" if math.isfinite(task.floor) else ""
    table = Table(title=f"{task.name}: {task.description}; {task.steps} steps of "
                        f"{task.batch}, seed {task.seed}{floor}")
    table.add_column("optimizer")
    table.add_column("training loss (last 10%)", justify="right")
    if math.isfinite(task.floor):
        table.add_column("- floor", justify="right")
    table.add_column("loss at 10% / 50%", justify="right")
    table.add_column("YellowFin / this", justify="right")
    table.add_column("fit s", justify="right")
    for run in runs:
        mark = " *" if id(run) in best else ""
        ratio = "" if run.diverged or run.candidate.family == "YellowFin" \
            else f"{verdict.yellowfin.loss / run.loss:.3f}"
        floor_cell = [f"{run.loss - task.floor:.4f}"] if math.isfinite(task.floor) else []
        table.add_row(run.candidate.label + mark, loss_text(run), *floor_cell,
                      f"{run.curve[0]:.3f} / {run.curve[len(run.curve) // 2 - 1]:.3f}",
                      ratio, f"{run.seconds:.1f}")
    yf = verdict.yellowfin
    table.caption = (f"YellowFin's tuned values at the end: lr {yf.yf_lr[-1]:.4g}, "
                     f"mu {yf.yf_mu[-1]:.4g}. * the family's best. A family's first fit time "
                     "includes XLA compilation.")
    return table, verdict


def summary_table(verdicts):
    label = verdicts[0][1].yellowfin.candidate.label if verdicts else "YellowFin"
    table = Table(title=f"claim: {label} <= 1.1 x the best of each family")
    for column in ("task", "seed", "steps", "YellowFin", "best SGD", "ratio", "best Adam",
                   "ratio", "holds"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for task, verdict in verdicts:
        cells = []
        for family in ("SGD", "Adam"):
            best = verdict.best[family]
            cells += ["all diverged" if best is None else
                      f"{loss_text(best)} (lr {best.candidate.rate:g})",
                      f"{verdict.ratio(family):.3f}"]
        table.add_row(task.name, str(task.seed), str(task.steps),
                      loss_text(verdict.yellowfin), *cells,
                      "yes" if verdict.passed else "[bold red]no[/]")
    return table


def option_value(parser, item, text):
    """``True``/``False``, an int or a float, from ``--yf``'s ``NAME=text``."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return parser.error(f"--yf {item}: the value must be a number, True or False")


def seed_list(text):
    """``--seeds``: integers separated by commas (``0,1,2``)."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are integers separated by commas, got {text!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=experiment.STEPS,
                        help="steps per run (multiple of 10)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=None,
                        help="training set size (default: steps x batch, one pass)")
    parser.add_argument("--seeds", type=seed_list, nargs="+", default=[[0]],
                        help="data, initialisation and batch-order seeds (0,1,2 or 0 1 2)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--yf", nargs="+", default=[], metavar="NAME=VALUE",
                        help="YellowFin arguments (numbers or True/False); default: none")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the claim holds on every task and seed "
                             "(yellowfin_tasks.claim_failures)")
    args = parser.parse_args(argv)
    args.seeds = [seed for group in args.seeds for seed in group]
    if args.check and args.yf:
        parser.error("--check: the claim is about YellowFin's defaults; leave out --yf")
    yellowfin = {}
    for item in args.yf:
        name, _, value = item.partition("=")
        if not value:
            parser.error(f"--yf takes NAME=VALUE, got {item!r}")
        yellowfin[name] = option_value(parser, item, value)
    try:
        keras_caffe.YellowFin(**yellowfin)  # a bad --yf fails now, not after the baselines
    except (TypeError, ValueError) as err:
        parser.error(f"--yf: {err}")
    if args.steps <= 0 or args.steps % experiment.WINDOWS:
        parser.error(f"--steps must be a positive multiple of {experiment.WINDOWS}")
    console.print(f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
                  f"{experiment.machine()}")
    console.print(f"XLA; training loss = mean over the last "
                  f"{args.steps // experiment.WINDOWS} steps; seeds "
                  f"{','.join(map(str, args.seeds))}")
    verdicts, failures = [], []
    start = time.perf_counter()
    for seed in args.seeds:
        for name in args.tasks:
            task = TASKS[name](steps=args.steps, batch=args.batch, samples=args.samples,
                               seed=seed)
            runs = experiment.run_task(task, yellowfin=yellowfin, progress=lambda task, run: (
                console.print(f"  {task.name} seed {task.seed}: {run.candidate.label:22s} "
                              f"{loss_text(run)}")))
            table, verdict = task_table(task, runs)
            console.print(table)
            verdicts.append((task, verdict))
            failures += experiment.claim_failures(task, runs)
    console.print(summary_table(verdicts))
    console.print(f"total {time.perf_counter() - start:.0f} s; load average "
                  + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    if args.check:
        for line in failures:
            console.print(f"CLAIM FAILS: {line}", markup=False, highlight=False)
        console.print(f"claim {'FAILS' if failures else 'holds'}: {len(args.seeds)} seed(s) x "
                      f"{len(args.tasks)} task(s), {args.steps} steps of {args.batch}")
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
