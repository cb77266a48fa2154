"""``rlmedic env``: the versions that matter, to paste into an issue or a question."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("env", short_help="Print the versions that matter, to paste into an issue.")(env)


def env(
    json_out: bool = typer.Option(False, "--json", help="Print as JSON (what `rlmedic ask` and the known-issue matcher read)."),
    python: str = typer.Option(None, "--python", metavar="PY",
                               help="Report the environment of this interpreter (the training one) instead of rlmedic's "
                                    "own; read from its dist-info, nothing there is imported."),
) -> None:
    """Python, torch and its CUDA, driver and GPUs, and the versions of sglang, vllm, megatron-core, transformers,
    ray, areal, slime, verl, flash-attn, flashinfer, deepspeed and NCCL (read from package metadata, nothing imported)."""
    from rlmedic.tools.envinfo import collect, render
    from rlmedic.ui.clikit import print_json

    data = collect(python=python)
    if json_out:
        print_json(data)
        return
    typer.echo(render(data))
