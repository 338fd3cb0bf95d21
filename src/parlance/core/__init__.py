"""Dialect-free, engine-free domain types: requests, events, errors, the accumulator."""
