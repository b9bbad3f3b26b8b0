"""Benchmarks: `nox -s bench` (speed goals are measured and reported as ratios, never asserted)."""
