"""``python -m rlmedic`` and the ``rlmedic`` console script.

The collector is paused before anything is imported (typer, pydantic and the command modules
build long-lived objects it would keep walking) and resumed when the command starts its work.
"""


def main() -> None:
    from rlmedic.memory import pause_gc_for_startup

    pause_gc_for_startup()  # resumed by the command itself (rlmedic.ui.cli._Command.invoke)
    from rlmedic.ui.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
