"""The model layer: dtypes, units, shapes, formulas, capacity, presets, config.json; no torch."""
