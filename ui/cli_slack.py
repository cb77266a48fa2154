"""``rlmedic slack``: run the Slack bot (Socket Mode by default, ``--http`` for the Events API)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from rlmedic.tools.cluster.options import RAY_ADDRESS_HELP
from rlmedic.ui.cli_knowledge import KNOWN_ISSUES_HELP, use_known_issues
from rlmedic.ui.params import path as path_param

from rlmedic.errors import UserError


def register(app: typer.Typer) -> None:
    app.command("slack")(slack)


def slack(
    http: bool = typer.Option(False, "--http", help="Serve the Events API over HTTP (needs SLACK_SIGNING_SECRET) instead of Socket Mode."),
    port: int = typer.Option(3000, "--port", help="HTTP port (with --http)."),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP address (with --http); keep loopback behind a TLS proxy."),
    allow_channel: list[str] = typer.Option([], "--allow-channel", metavar="ID",
                                            help="Answer only in these channels (repeatable; default $RLMEDIC_SLACK_CHANNELS, else all)."),
    allow_user: list[str] = typer.Option([], "--allow-user", metavar="ID",
                                         help="Answer only these users (repeatable; default $RLMEDIC_SLACK_USERS, else all)."),
    rate_per_minute: float = typer.Option(6.0, "--rate", min=0.1, help="Questions per user per minute (after a burst of 3)."),
    max_file_mb: float = typer.Option(20.0, "--max-file-mb", min=0.01, help="Largest attachment downloaded, in MiB."),
    offline: bool = typer.Option(False, "--offline", help="Answer without an LLM (the offline engine)."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help="Index directory (default: $RLMEDIC_HOME/index)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each event handled or ignored."),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP + " Re-read for each question (default: $RLMEDIC_RAY_ADDRESS)."),
) -> None:
    """Answer @mentions and DMs in Slack threads.

    Socket Mode by default (SLACK_BOT_TOKEN, SLACK_APP_TOKEN); --http serves the Events API
    with SLACK_SIGNING_SECRET.
    """
    use_known_issues(known_issues)
    from rlmedic.ui.slack_app import SlackBot, SlackSettings, build_app, serve_http

    import logging  # here, not at start-up: `rlmedic --help` never needs it

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    if not verbose:  # bolt's start-up chatter (e.g. "token will be unused" when SLACK_BOT_TOKEN feeds our client)
        logging.getLogger("rlmedic.slack.bolt").setLevel(logging.ERROR)
    settings = SlackSettings.from_env(
        allowed_channels=frozenset(allow_channel), allowed_users=frozenset(allow_user),
        rate_per_minute=rate_per_minute, max_file_bytes=int(max_file_mb * 2**20), offline=offline or None,
        index_dir=str(index_dir) if index_dir else None, ray_address=ray_address,
    )
    if settings.ray_address:  # a wrong address stops here, with one line, not at the first question
        from rlmedic.tools.cluster.address import resolve

        resolve(settings.ray_address)
    if not settings.bot_token:
        raise UserError("SLACK_BOT_TOKEN is not set (the bot token, xoxb-...; see README: the Slack bot)")
    if not http and not settings.app_token:
        raise UserError("Socket Mode needs SLACK_APP_TOKEN (an app-level token, xapp-..., scope connections:write); "
                        "or run with --http and SLACK_SIGNING_SECRET")
    bot = SlackBot(settings)
    app = build_app(bot, socket_mode=not http)
    if http:
        server = serve_http(app, host, port)
        typer.echo(f"rlmedic slack: Events API on http://{host}:{server.server_address[1]}/slack/events", err=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    typer.echo("rlmedic slack: connecting over Socket Mode (Ctrl-C stops)", err=True)
    SocketModeHandler(app, os.environ.get("SLACK_APP_TOKEN", settings.app_token)).start()
