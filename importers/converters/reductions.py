"""Converters: reductions (see the module's functions)."""
