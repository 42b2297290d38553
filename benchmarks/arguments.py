"""Argument types the benchmarks/ scripts share (each script runs with this
folder first on ``sys.path``; tests/support/scripts.py loads them so too)."""

import argparse


def positive_int(text):
    """An integer >= 1, else argparse's usage error naming the option."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
