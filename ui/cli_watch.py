"""``rlmedic watch``: follow live training logs and alert once per incident.

Thin: the following and the incident logic live in ``tools/logs/follow.py`` and
``tools/logs/watch.py``; this module parses flags and delivers each alert to one place:
Slack (``chat.postMessage`` with the bot token in ``SLACK_BOT_TOKEN`` and
``--slack-channel``), a webhook (``--webhook``: a JSON POST with ``text``, which Slack
incoming webhooks accept, plus the structured ``alert``), or standard output.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from rlmedic.errors import UserError
from rlmedic.tools.cluster.options import JOB_HELP, RAY_ADDRESS_HELP, SINCE_HELP, check_options


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)


def slack_sink(token: str, channel: str, *, base_url: str | None = None) -> Callable[[Any], None]:
    from rlmedic.ui.slack_client import make_client

    client = make_client(token, base_url)

    def post(alert: Any) -> None:
        from slack_sdk.errors import SlackClientError

        text = alert.text()
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}]
        try:
            client.chat_postMessage(channel=channel, text=text[:3000], blocks=blocks, unfurl_links=False)
        except (SlackClientError, OSError) as exc:  # Slack down or refusing: the alert is not lost
            typer.echo(f"rlmedic watch: posting to Slack failed ({type(exc).__name__}); the alert follows", err=True)
            typer.echo(text, err=True)

    return post


def webhook_sink(url: str) -> Callable[[Any], None]:
    import httpx

    def post(alert: Any) -> None:
        try:
            httpx.post(url, json={"text": alert.text(), "alert": alert.to_dict()}, timeout=10).raise_for_status()
        except httpx.HTTPError as exc:
            typer.echo(f"rlmedic watch: webhook failed ({type(exc).__name__}); the alert follows", err=True)
            typer.echo(alert.text())

    return post


def stdout_sink(alert: Any) -> None:
    typer.echo(alert.text(slack=False) + "\n", color=False)


def choose_sink(slack_channel: str | None, webhook: str | None) -> tuple[str, Callable[[Any], None]]:
    token = os.environ.get("SLACK_BOT_TOKEN", "")
    if slack_channel and token:
        return f"Slack channel {slack_channel}", slack_sink(token, slack_channel)
    if slack_channel and not webhook:
        raise UserError("--slack-channel needs SLACK_BOT_TOKEN in the environment (or use --webhook)")
    if webhook:
        if not webhook.startswith(("http://", "https://")):
            raise UserError(f"--webhook {webhook}: not an http(s) URL")
        return "the webhook", webhook_sink(webhook)
    return "stdout", stdout_sink


def watch(
    paths: Optional[list[Path]] = typer.Argument(None, metavar="PATH", help="Log files or folders of rank logs to follow; W&B run or wandb/ folders, TensorBoard log folders."),
    slack_channel: Optional[str] = typer.Option(None, "--slack-channel", help="Post alerts to this channel (needs SLACK_BOT_TOKEN)."),
    webhook: Optional[str] = typer.Option(None, "--webhook", help="POST alerts as JSON to this URL (a Slack incoming webhook works)."),
    interval: float = typer.Option(10.0, "--interval", min=0.05, help="Seconds between looks at the logs."),
    stall_minutes: float = typer.Option(30.0, "--stall-minutes", min=0, help="Alert when no training step for this long (0: off)."),
    zero_reward_steps: int = typer.Option(10, "--zero-reward-steps", min=1, help="Circuit breaker: this many consecutive zero-reward steps."),
    checkpoints: Optional[Path] = typer.Option(None, "--checkpoints", help="The run's checkpoint root: alerts include the recovery plan."),
    from_end: bool = typer.Option(False, "--from-end", help="Ignore what the logs hold now; watch only new lines."),
    once: bool = typer.Option(False, "--once", help="Look once, report, and exit (exit 1 when it alerted, as diagnose --fail-on)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP + " Synced every --interval."),
    job: Optional[str] = typer.Option(None, "--job", metavar="ID", help=JOB_HELP),
    since: Optional[float] = typer.Option(None, "--since", metavar="MINUTES", help=SINCE_HELP),
) -> None:
    """Follow live logs and alert once per incident.

    Failures, stalls, the zero-reward circuit breaker, NaN loss and gradient-norm spikes go to
    Slack, a webhook or stdout.
    """
    check_options(ray_address, job, since)
    if ray_address is not None:  # the job's logs on every node, re-synced every interval, followed as a folder
        from rlmedic.tools.cluster.frontdoor import live_folder

        with live_folder(ray_address, job=job, since_minutes=since, interval=None if once else interval) as folder:
            return watch([*(paths or []), folder], slack_channel=slack_channel, webhook=webhook, interval=interval,
                         stall_minutes=stall_minutes, zero_reward_steps=zero_reward_steps, checkpoints=checkpoints,
                         from_end=from_end, once=once, ray_address=None, job=None, since=None)
    if not paths:
        raise UserError("give a log PATH to follow or --ray-address ADDR")
    from rlmedic.tools.logs.watch import WatchOptions, Watcher

    if checkpoints is not None and not checkpoints.exists():
        raise UserError(f"--checkpoints {checkpoints}: no such directory")
    where, sink = choose_sink(slack_channel, webhook)
    options = WatchOptions(interval=interval, stall_minutes=stall_minutes, zero_reward_steps=zero_reward_steps,
                           checkpoints=str(checkpoints) if checkpoints else None, from_start=not from_end)
    from rlmedic.tools.runs.locate import run_kind

    if any(run_kind(p) for p in paths):  # W&B / TensorBoard run folders, metric dumps: their curves
        from rlmedic.tools.runs.watch import RunWatcher

        watcher: Any = RunWatcher([str(p) for p in paths], options)
    else:
        watcher = Watcher([str(p) for p in paths], options)
    stop = threading.Event()
    previous = {}
    if not once and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):  # stop between ticks, cleanly (exit 0)
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    if not once:
        typer.echo(f"rlmedic watch: following {', '.join(map(str, paths))}; alerts go to {where} "
                   f"(every {interval:g} s; Ctrl-C stops)", err=True)
    try:
        sent = watcher.run(sink, stop=stop, once=once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if once or sent:
        typer.echo(f"rlmedic watch: {sent} alert(s)", err=True)
    if once and sent:  # a script or CI step that looks once can tell a failing run by the exit code
        raise typer.Exit(1)
