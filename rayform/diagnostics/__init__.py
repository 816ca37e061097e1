"""Measures of what a loader delivers (how mixed its batches are): for tests and benchmarks."""
