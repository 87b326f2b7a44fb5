"""What the test modules share besides conftest's fixtures: one runner of the CLI in this
process (`runner.invoke(app, [...])`). It keeps no state between invocations."""

from __future__ import annotations

from typer.testing import CliRunner

runner = CliRunner()
