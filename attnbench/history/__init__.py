"""Performance history: runs stored over commits, their series and change points."""
