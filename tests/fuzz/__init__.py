"""Fuzzing support: the seed corpus of real client requests, its capture script and mutators."""
