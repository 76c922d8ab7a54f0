"""Constraints: request -> constraint, compile cache, schema support and diagnostics."""
