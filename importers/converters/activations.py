"""Converters: activations (see the module's functions)."""
