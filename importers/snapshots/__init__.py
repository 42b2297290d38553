"""``_iter_N`` training snapshots: Caffe's binary and HDF5 formats and ours,
written atomically and restored exactly (``save_snapshot``/``load_snapshot``
in ``files``)."""
