"""Studies: the sweep schema and files, typed points, the one runner, result files."""
