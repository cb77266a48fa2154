"""``rlmedic ask``, ``serve-model`` and ``eval``: the agent from the terminal.

Thin: it resolves flags and attachments, then renders the engine's events (tool steps
and notices on stderr, the answer on stdout; ``--json`` prints the structured Answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rlmedic.tools.cluster.options import JOB_HELP, RAY_ADDRESS_HELP, SINCE_HELP, check_options
from rlmedic.ui.cli_code import ENV_HELP, SOURCE_HELP
from rlmedic.ui.cli_knowledge import CHROMA_URL_HELP, KNOWN_ISSUES_HELP, use_chroma_url, use_known_issues
from rlmedic.ui.params import path as path_param

INDEX_DIR_HELP = "Index directory (default: $RLMEDIC_HOME/index or the per-user data dir)."
BASE_URL_HELP = "OpenAI-compatible server, e.g. http://127.0.0.1:30000/v1 (default: $RLMEDIC_BASE_URL or that URL)."


def register(app: typer.Typer) -> None:
    app.command("ask", short_help="Ask a troubleshooting question; the answer cites sources.")(ask)
    app.command("serve-model", short_help="Start SGLang for a local model and print its URL.")(serve_model)
    app.command("eval", short_help="Score the agent on a set of cases.")(eval_cases)


def ask(
    question: str = typer.Argument(..., metavar="QUESTION", help="Your question, an error message, or pasted log lines."),
    attach: list[str] = typer.Option([], "--attach", "-a", metavar="FILE",
                                     help="A log, config, launch script, GPU snapshot or checkpoint folder ('-' = stdin). Repeatable."),
    offline: bool = typer.Option(False, "--offline", help="Answer without an LLM (tools + retrieval + playbook cards)."),
    json_out: bool = typer.Option(False, "--json", help="Print the structured answer as JSON."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help=BASE_URL_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on the server (default: $RLMEDIC_MODEL or the first listed)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="API key (default: $RLMEDIC_API_KEY)."),
    thread: Optional[str] = typer.Option(None, "--thread", help="Conversation id: follow-up questions with the same id share memory."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", min=1,
                                            help="Most seconds the model may take for the answer (default: $RLMEDIC_TIMEOUT or 120); the offline answer follows."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help=INDEX_DIR_HELP),
    chroma_url: Optional[str] = typer.Option(None, "--chroma-url", help=CHROMA_URL_HELP),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
    env_file: Optional[Path] = typer.Option(None, "--env", metavar="FILE", help=ENV_HELP),
    source: Optional[Path] = typer.Option(None, "--source", metavar="PATH", help=SOURCE_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print the rest of the answer: further fixes, background, related issues."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP),
    job: Optional[str] = typer.Option(None, "--job", metavar="ID", help=JOB_HELP),
    since: Optional[float] = typer.Option(None, "--since", metavar="MINUTES", help=SINCE_HELP),
) -> None:
    """Ask a troubleshooting question; attached files are investigated with rlmedic's tools."""
    from rlmedic.ui.cli_code import env_versions

    check_options(ray_address, job, since)

    env_versions(env_file)  # a file that is no listing stops here, with one line
    use_known_issues(known_issues)
    use_chroma_url(chroma_url)
    from rlmedic.agent.events import Failed, Final, Notice, TextDelta, ToolFinished, ToolStarted
    from rlmedic.ui.render import step_result
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.agent.session import Session
    from rlmedic.ui.clikit import print_json
    from rlmedic.ui.cli_knowledge import existing_index_dir

    existing_index_dir(index_dir, chroma_url)
    config = None if offline else LLMConfig.resolve(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout)
    if source is not None and not source.expanduser().is_dir():
        from rlmedic.errors import UserError

        raise UserError(f"--source {source}: no such folder")
    session = Session(thread, offline=offline, config=config, index_dir=index_dir, prefix="ask",
                      roots=[source.expanduser()] if source is not None else None)  # readable by quote_code
    try:
        for name in attach:
            if name == "-":
                session.attach_stdin()
            else:
                session.attach(name)
        if env_file is not None:  # read by the read_env tool: its versions judge upstream and known-issue fixes
            session.attach(str(env_file))
        if ray_address is not None:  # the job's logs on every node: one more attached folder
            from rlmedic.tools.cluster.frontdoor import cli_folder, session_folder

            session.attach(cli_folder(ray_address, job=job, since_minutes=since, into=session_folder(session)))
        for note in session.notices:
            typer.echo(f"note: {note}", err=True)
        streamed = False
        for event in session.ask(question):
            if isinstance(event, Final):
                if json_out:
                    print_json(event.answer.to_dict())
                elif not streamed:
                    typer.echo(event.answer.answer)
                elif event.answer.engine == "llm":  # the model's prose was streamed; what the tools established follows
                    from rlmedic.agent.compose import grounded_text

                    typer.echo("")
                    grounded = grounded_text(event.answer)
                    if grounded:
                        typer.echo(grounded)
                else:  # the offline answer streamed whole: it already holds every grounded part
                    typer.echo("")
                if not json_out:
                    _more(event.answer.more, verbose)
            elif json_out:
                continue
            elif isinstance(event, Notice):
                typer.echo(f"note: {event.text}", err=True)
            elif isinstance(event, ToolStarted):
                typer.echo(f"-> {event.name} {_args(event.args)}", err=True)
            elif isinstance(event, ToolFinished):  # the tool's own step line, as chat, web and Slack show it
                typer.echo(f"<- {event.name}: {step_result(event.name, event.ok, event.data, event.error)}", err=True)
            elif isinstance(event, TextDelta):
                typer.echo(event.text, nl=False)
                streamed = True
            elif isinstance(event, Failed):  # the exception with its traceback follows
                typer.echo(f"rlmedic: failed: {event.error}", err=True)
    finally:
        session.close()


def _more(more: str, verbose: bool) -> None:
    """The verbose part of the answer, or one line saying it is there."""
    if not more.strip():
        return
    if verbose:
        typer.echo("\n" + more.rstrip())
    else:
        n = len([line for line in more.splitlines() if line.strip()])
        typer.echo(f"({n} more line(s): further fixes, background and sources with --verbose)", err=True)


def _args(args: dict) -> str:
    import json

    text = json.dumps(args, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def serve_model(
    model: str = typer.Option(..., "--model", help="Local model folder or Hugging Face id."),
    port: int = typer.Option(30000, "--port", help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (127.0.0.1 keeps it local)."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor parallel size (GPUs per model)."),
    mem_fraction_static: Optional[float] = typer.Option(None, "--mem-fraction-static", help="Share of GPU memory for weights + KV cache."),
    context_length: Optional[int] = typer.Option(None, "--context-length", help="Max context length."),
    sglang_python: Optional[str] = typer.Option(None, "--sglang-python", help="Python of SGLang's own venv (default: $RLMEDIC_SGLANG_PYTHON or this Python)."),
    tool_call_parser: Optional[str] = typer.Option(None, "--tool-call-parser", help="Override the parser picked from the model family."),
    reasoning_parser: Optional[str] = typer.Option(None, "--reasoning-parser", help="Override the reasoning parser ('none' turns it off)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the SGLang command and exit."),
) -> None:
    """Start an SGLang server for a local model, wait until healthy, print its base URL."""
    from rlmedic.ui.serve_model import ServeOptions, build_command, default_python_note, serve

    opts = ServeOptions(model=model, port=port, host=host, tp=tp, mem_fraction_static=mem_fraction_static,
                        context_length=context_length, sglang_python=sglang_python or "",
                        tool_call_parser=tool_call_parser or "", reasoning_parser=reasoning_parser or "")
    if dry_run:
        typer.echo(" ".join(build_command(opts)))
        note = default_python_note(opts)
        if note:
            typer.echo(f"rlmedic: note: {note}", err=True)
        return
    raise typer.Exit(serve(opts, echo=lambda s: typer.echo(s, err=True)))


def eval_cases(
    cases: Path = typer.Argument(..., metavar="CASES", help="A JSONL file of cases, a folder of JSONL files, or a folder of case folders."),
    split: Optional[str] = typer.Option(None, "--split", metavar="NAME", help="Only cases of this split (dev or heldout); without it, splits are reported side by side."),
    offline: bool = typer.Option(False, "--offline", help="Evaluate the offline engine."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help=BASE_URL_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Model name on the server."),
    json_out: bool = typer.Option(False, "--json", help="Print per-case scores and totals as JSON."),
    record: Optional[Path] = typer.Option(None, "--record", help="Save each case's transcript (events) in this folder."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help=INDEX_DIR_HELP),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
    env_file: Optional[Path] = typer.Option(None, "--env", metavar="FILE", help=ENV_HELP + " Attached to every case "
                                            "(a case's own listing in its attachments/ is read the same way)."),
) -> None:
    """Score the agent on cases: category right, must-mention share, citation, tool calls, seconds."""
    from rlmedic.ui.cli_code import env_versions

    env_versions(env_file)  # a file that is no listing stops here, with one line
    use_known_issues(known_issues)
    from rlmedic.agent.evaluate import evaluate, load_cases
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.knowledge.index import KnowledgeBase
    from rlmedic.ui.clikit import print_json

    config = None if offline else LLMConfig.resolve(base_url=base_url, model=model)
    from rlmedic.ui.cli_knowledge import existing_index_dir

    loaded = load_cases(cases, split or "")
    if env_file is not None:
        for case in loaded:
            case.attachments = [*case.attachments, env_file.expanduser().resolve()]
    report = evaluate(loaded, offline=offline, config=config, kb=KnowledgeBase(existing_index_dir(index_dir)),
                      record=record)
    if json_out:
        print_json(report.to_dict())
        return
    for score in report.scores:
        mark = "ok " if score.category_right else "-- "
        typer.echo(f"{mark}{score.id}: category {score.category or '?'} (want {score.expected_category}), "
                   f"mentions {score.mention_share:.0%}, citation {'yes' if score.cited else 'no'}, "
                   f"{score.tool_calls} tool calls, {score.seconds:.1f} s")
    typer.echo(report.summary())
