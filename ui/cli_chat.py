"""``rlmedic chat`` and ``rlmedic web``: a conversation in the terminal or in the browser."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from rlmedic.tools.cluster.options import JOB_HELP, RAY_ADDRESS_HELP, SINCE_HELP, check_options
from rlmedic.ui.cli_code import ENV_HELP
from rlmedic.ui.cli_knowledge import KNOWN_ISSUES_HELP, use_known_issues
from rlmedic.ui.params import path as path_param

BASE_URL_HELP = "OpenAI-compatible server, e.g. http://127.0.0.1:30000/v1 (default: $RLMEDIC_BASE_URL)."


def register(app: typer.Typer) -> None:
    app.command("chat", short_help="Chat about a failed run in the terminal.")(chat)
    app.command("web", short_help="Serve the chat as a local web page.")(web)


def _config(offline: bool, base_url: Optional[str], model: Optional[str], api_key: Optional[str]):  # noqa: ANN202
    if offline:
        return None
    from rlmedic.agent.llm import LLMConfig

    return LLMConfig.resolve(base_url=base_url, model=model, api_key=api_key)


def chat(
    attach: list[str] = typer.Option([], "--attach", "-a", metavar="FILE", help="Start with this log, config or folder attached (repeatable)."),
    offline: bool = typer.Option(False, "--offline", help="Answer without an LLM (tools + playbook cards + docs)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help=BASE_URL_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on the server (default: $RLMEDIC_MODEL or the first listed)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (default: $RLMEDIC_API_KEY)."),
    thread: Optional[str] = typer.Option(None, "--thread", help="Continue this conversation (the same id as ask --thread); "
                                                               "default: a new one."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help="Index directory (default: the data dir)."),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
    env_file: Optional[Path] = typer.Option(None, "--env", metavar="FILE", help=ENV_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP),
    job: Optional[str] = typer.Option(None, "--job", metavar="ID", help=JOB_HELP),
    since: Optional[float] = typer.Option(None, "--since", metavar="MINUTES", help=SINCE_HELP),
) -> None:
    """Chat about a failed run in the terminal; /help lists the commands (piped input works too)."""
    check_options(ray_address, job, since)
    use_known_issues(known_issues)
    from rlmedic.agent.session import Session
    from rlmedic.ui.chat import chat_loop

    from rlmedic.ui.cli_knowledge import existing_index_dir

    conv = Session(thread, offline=offline, config=_config(offline, base_url, model, api_key),
                   index_dir=existing_index_dir(index_dir), persist=True, prefix="chat")
    if env_file is not None:
        from rlmedic.ui.cli_code import env_versions

        env_versions(env_file)  # a file that is no listing stops here, with one line
        attach = [*attach, str(env_file)]
    if ray_address is not None:  # the job's logs on every node, kept with the conversation
        from rlmedic.tools.cluster.frontdoor import cli_folder, session_folder

        attach = [*attach, str(cli_folder(ray_address, job=job, since_minutes=since, into=session_folder(conv)))]
    if attach:
        conv.attach(*attach)
    code = chat_loop(conv)
    _exit_now_if_answers_linger(code)
    raise typer.Exit(code)


def _exit_now_if_answers_linger(code: int) -> None:
    """An answer stopped with Ctrl-C may still wait on the model server in a worker thread;
    leaving must not wait for it (thread pools are joined at exit), so end the process now."""
    import sys
    import threading

    if any(t.name == "rlmedic-answer" and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def web(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback unless you say otherwise)."),
    port: int = typer.Option(7860, "--port", min=1, max=65535, help="Port."),
    auth: Optional[str] = typer.Option(None, "--auth", metavar="USER:PASS", help="Require this login (default: $RLMEDIC_WEB_AUTH)."),
    max_upload_mb: int = typer.Option(200, "--max-upload-mb", min=1, help="Largest upload accepted, in MB."),
    offline: bool = typer.Option(False, "--offline", help="Answer without an LLM (tools + playbook cards + docs)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help=BASE_URL_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on the server."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (default: $RLMEDIC_API_KEY)."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help="Index directory (default: the data dir)."),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP + " Re-read for each question (default: $RLMEDIC_RAY_ADDRESS)."),
    job: Optional[str] = typer.Option(None, "--job", metavar="ID", help=JOB_HELP),
) -> None:
    """Serve the chat as a web page (Gradio): upload logs and configs, see the diagnosis, diff, GPUs and sources."""
    use_known_issues(known_issues)
    from rlmedic.errors import UserError
    from rlmedic.ui.web import WebSettings, launch

    auth = auth or os.environ.get("RLMEDIC_WEB_AUTH") or None
    credentials = None
    if auth:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise UserError("--auth must be USER:PASS")
        credentials = (user, password)
    from rlmedic.ui.cli_knowledge import existing_index_dir

    from rlmedic.settings import ray_address as configured_ray_address

    ray_address = configured_ray_address(ray_address)
    check_options(ray_address, job, None)
    if ray_address:  # a wrong address stops here, with one line, not at the first question
        from rlmedic.tools.cluster.address import resolve

        resolve(ray_address)
    settings = WebSettings(offline=offline, config=_config(offline, base_url, model, api_key), index_dir=existing_index_dir(index_dir),
                           max_upload_mb=max_upload_mb, ray_address=ray_address, ray_job=job)
    launch(settings, host=host, port=port, auth=credentials, block=True)
    import sys
    import threading

    # the upload folders are gone by now; a Gradio thread still closing connections must not hold
    # the exit past Ctrl-C (a stop within seconds)
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
