"""Caffe's ``-weights`` for the Solver: ``.caffemodel`` files copied into the
train net layer by layer, by name (``Net::CopyTrainedLayersFrom``). Layers
of a file the net lacks are ignored, layers of the net a file lacks keep
their fillers' values; weights sharing no layer name with the net are
refused (another net's). What was copied is reported: Caffe's log lines
layer by layer and a summary, or the summary alone, one line on stderr, in
progress mode."""

import sys

from keras_caffe.errors import WeightsError
from keras_caffe.importers.net.importing import copy_layers
from keras_caffe.importers.net.weights import load_weights


def copy_weights(net, weights, *, log=None, progress=False):
    """Copy ``weights`` (a path, comma-separated paths or a list) into
    ``net``, in order; returns the ``CopyReport`` of each file."""
    paths = weights.split(",") if isinstance(weights, str) else list(weights)
    reports = []
    for path in paths:
        if log:
            log.finetuning(path)
        found = load_weights(path)
        report = copy_layers(net, found, source=str(path))
        if not report.copied:
            raise WeightsError(
                f"{path}: none of its layers ({_names(found)}) is a layer of the net with "
                f"blobs ({_names(report.kept)}): weights of another net? Caffe copies "
                "weights by layer name")
        _report(path, report, list(found), log, progress)
        reports.append(report)
    return reports


def _report(path, report, order, log, progress):
    """Caffe's log: Net::CopyTrainedLayersFrom's lines in the file's
    ``order`` ("Copying source layer", Caffe's debug line, and "Ignoring
    source layer"), then a summary; progress mode: the summary alone."""
    summary = f"Copied {len(report.copied)} layer(s) from {path}: {_names(report.copied)}"
    kept = (f"Not in {path}, learned from their fillers: {_names(report.kept)}"
            if report.kept else "")
    if log:
        log.copied_layers(order, set(report.copied), report.ignored)
        for line in (summary, kept):
            if line:
                log.info(line)
    elif progress:
        ignored = (f". Ignoring source layer(s) not in the net: {_names(report.ignored)}"
                   if report.ignored else "")
        print(summary + ignored + (f". {kept}" if kept else ""), file=sys.stderr)


def _names(names):
    return ", ".join(names) if names else "none"
