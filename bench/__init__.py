"""Benchmarks (not tests): they measure and print ratios; nothing here asserts a speed."""
