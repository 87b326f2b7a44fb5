"""Rendering: tables that fit the terminal, their column specs, plots, the report."""
