"""Benchmarks (not timed tests): harness overhead, concurrency against a stub server, the embedded model.

Run them all with ``python -m benchmarks`` (or name some: ``python -m benchmarks overhead``).
"""
