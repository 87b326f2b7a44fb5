"""The regression gate: compare two result documents, baselines, the gate simulation."""
