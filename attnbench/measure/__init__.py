"""Measuring: the one timing harness, devices, the environment, allocated memory."""
