"""What the test modules share besides conftest's fixtures: one runner of the CLI in this
process (`runner.invoke(app, [...])`). It keeps no state between invocations."""

from __future__ import annotations

from functools import cache

import click
import click.testing
import typer
import typer.main


@cache
def command_of(app: typer.Typer) -> click.Command:
    """The click command of a typer app, built once: the app does not change while the
    tests run, and a command parses into a context of its own at every call."""
    return typer.main.get_command(app)


class AppRunner(click.testing.CliRunner):
    """click's runner, given a typer app: what typer's own runner does, except that it
    builds the click command at every invocation (about 10 ms, more than most commands a
    test runs take)."""

    def invoke(self, app: typer.Typer, args=None, **kwargs) -> click.testing.Result:  # type: ignore[override]
        return super().invoke(command_of(app), args, **kwargs)


runner = AppRunner()


#: A small model that every transformers class builds in a blink: hidden 64, 4 heads of
#: 16, 2 KV heads, 4 layers, a vocabulary of 100 (and no special tokens: the defaults of
#: some classes lie outside so small a vocabulary).
SMALL_CONFIG = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 4,
    "vocab_size": 100,
    "intermediate_size": 96,
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
}


def one_error(result: click.testing.Result, code: int = 2) -> str:
    """The single `error:` line of a refused command (exit `code`, no traceback)."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def predict_point(name: str, **given):
    """A predict point of preset `name` on an H100 SXM, batch 1, context 2,048, in the
    model's dtype; `given` fields replace these."""
    from attnbench.experiments.predict import PredictPoint
    from attnbench.model.presets import get_preset

    spec = get_preset(name)
    fields = {
        "gpu": "h100-sxm",
        "batch": 1,
        "seq_len": 2048,
        "dtype": spec.dtype,
        "d_model": spec.d_model,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "model": spec.name,
        "spec": spec,
    }
    return PredictPoint(**{**fields, **given})
