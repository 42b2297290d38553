"""Caffe's training loop: ``Solver`` (``keras-caffe train``), its compiled
step, signals, Caffe's log lines, progress, the resume state and random
states snapshots carry, and ``caffe test``'s scoring."""
