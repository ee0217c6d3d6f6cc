"""Mutation testing: named bugs planted one at a time in a copy of the code, each run against its tests."""
