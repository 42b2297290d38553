"""Converters: shape (see the module's functions)."""
