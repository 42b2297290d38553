"""Converters: learned (see the module's functions)."""
