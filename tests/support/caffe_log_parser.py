"""A parser of Caffe training logs, written from Caffe's log format.

It reads logs the way Caffe's ``tools/extra/parse_log.py`` does (and the
plotting scripts built on it): glog lines ``I%m%d %H:%M:%S.%f tid file:line]
message``; the current iteration is the last ``Iteration (\\d+)`` seen;
``Train net output #k: name = value`` and ``Test net output #k: name =
value`` rows belong to it; ``lr = value`` sets the rate; ``Iteration N
(...), loss = value`` is the smoothed training loss. Time comes from the
glog prefix (month and day from ``I%m%d``), so a line whose prefix
parse_log.py cannot read fails here too.
"""

import datetime
import re

ITERATION = re.compile(r"Iteration (\d+)")
TRAIN_OUTPUT = re.compile(r"Train net output #(\d+): (\S+) = ([\.\deE+-]+)")
TEST_OUTPUT = re.compile(r"Test net output #(\d+): (\S+) = ([\.\deE+-]+)")
LEARNING_RATE = re.compile(r"lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)")
SMOOTHED_LOSS = re.compile(r"Iteration (\d+)(?: \(.*\))?, loss = ([-+.\deE]+|nan|inf)")
#: glog's classic prefix, which parse_log.py reads: I<month><day> <time> <tid> <file>:<line>]
PREFIX = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6}) +\d+ [\w.]+:\d+\] ")
#: glog >= 0.7 writes the year too (I<yyyy><mm><dd>), as the golden Caffe logs show.
YEAR_PREFIX = re.compile(r"^[IWEF]\d{4}(\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6}) +\d+ [\w.]+:\d+\] ")


def timestamp(line, year=2026):
    """The time of a glog line, as parse_log.py's extract_datetime_from_line
    reads it: month = chars 1-2, day = chars 3-4 of the first field (the
    year-prefixed form is read too, for Caffe's own newer logs)."""
    match = PREFIX.match(line) or YEAR_PREFIX.match(line)
    month, day = int(match.group(1)), int(match.group(2))
    clock = datetime.datetime.strptime(match.group(3), "%H:%M:%S.%f")
    return datetime.datetime(year, month, day, clock.hour, clock.minute, clock.second,
                             clock.microsecond)


def parse(text):
    """``(train_rows, test_rows, smoothed)``: rows are dicts with NumIters,
    Seconds, LearningRate and one key per output; ``smoothed`` maps an
    iteration to the smoothed loss printed for it."""
    iteration, rate, start = -1, float("nan"), None
    train, test, smoothed = [], [], {}
    rows = {"train": None, "test": None}
    for line in text.splitlines():
        if not (PREFIX.match(line) or YEAR_PREFIX.match(line)):
            continue
        match = ITERATION.search(line)
        if match:
            iteration = int(match.group(1))
        if iteration == -1:
            continue
        when = timestamp(line)
        start = start or when
        seconds = (when - start).total_seconds()
        match = LEARNING_RATE.search(line)
        if match:
            rate = float(match.group(1))
        match = SMOOTHED_LOSS.search(line)
        if match:
            smoothed[int(match.group(1))] = float(match.group(2))
        for kind, regex, out in (("train", TRAIN_OUTPUT, train), ("test", TEST_OUTPUT, test)):
            match = regex.search(line)
            if not match:
                continue
            row = rows[kind]
            if row is None or row["NumIters"] != iteration:
                if row is not None:
                    out.append(row)
                row = rows[kind] = {"NumIters": iteration, "Seconds": seconds,
                                    "LearningRate": rate}
            row[match.group(2)] = float(match.group(3))
    for kind, out in (("train", train), ("test", test)):
        if rows[kind] is not None:
            out.append(rows[kind])
    return train, test, smoothed


def rates(text):
    """``{iteration: lr}`` from ``Iteration N, lr = r`` lines."""
    found = {}
    for match in re.finditer(r"Iteration (\d+), lr = ([-+.\deE]+)", text):
        found[int(match.group(1))] = float(match.group(2))
    return found
