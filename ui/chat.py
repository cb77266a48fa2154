"""``rlmedic chat``: a terminal conversation with the agent.

On a TTY it is a prompt_toolkit REPL (history kept in the data dir, path completion after
``/attach``) with rich rendering; piped, it reads one question or command per line and
prints plain text, so it can be scripted and tested. Answers stream as they come; each
tool step is one compact line. Ctrl-C stops the current answer (the session goes on),
Ctrl-D or ``/quit`` leaves.
"""

from __future__ import annotations

import queue
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rlmedic.agent.session import Session
from rlmedic.errors import UserError

HELP = """Commands:
  /attach PATH...   add logs, configs, launch scripts, GPU snapshots or checkpoint folders
  /detach [PATH...] drop attachments (all when none is named)
  /reset            forget the conversation (attachments stay)
  /save FILE        write the conversation as Markdown to a new file
  /offline          answer without the LLM (tools + playbook cards + docs)
  /online           use the model server again
  /help             this list
  /quit             leave (Ctrl-D too); Ctrl-C stops the current answer"""

COMMANDS = ("/attach", "/detach", "/reset", "/save", "/offline", "/online", "/help", "/quit")


class Printer:
    """Where the chat writes: plain text when piped, rich styles on a terminal."""

    def __init__(self, out: TextIO, *, rich: bool) -> None:
        self.out = out
        self.console = None
        if rich:
            from rich.console import Console

            self.console = Console(file=out, highlight=False)

    def line(self, text: str = "", style: str = "") -> None:
        if self.console is not None:
            self.console.print(text, style=style or None, markup=False)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def raw(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def answer(self, answer: Any, *, streamed: bool) -> None:
        """The final answer: already on screen when it streamed (its text ends with the sources)."""
        if streamed:
            self.raw("\n")
        elif self.console is not None:
            from rich.markdown import Markdown

            from rlmedic.ui.render import answer_markdown

            self.console.print(Markdown(answer_markdown(answer)))
        else:
            self.line(answer.answer.rstrip())


def run_question(conv: Session, question: str, printer: Printer, *,
                 wait: Callable[[queue.Queue, float], Any] | None = None) -> Any:
    """Ask one question, streaming events to ``printer``; Ctrl-C stops it and returns None.

    The engine runs in a worker thread so that Ctrl-C in the main thread only stops this
    answer: the worker sees the cancel flag before its next tool and between events.
    """
    from rlmedic.agent.events import Failed, Final, Notice, TextDelta, ToolFinished, ToolStarted
    from rlmedic.ui.render import step_args, step_result

    cancel = threading.Event()
    events: queue.Queue = queue.Queue()
    done = object()

    def work() -> None:
        try:
            for event in conv.ask(question, cancel=cancel):
                events.put(event)
        except Exception as exc:  # noqa: BLE001 - reported to the user, the session goes on
            events.put(exc)
        finally:
            events.put(done)

    worker = threading.Thread(target=work, name="rlmedic-answer", daemon=True)
    worker.start()
    streamed = False
    started: dict[str, float] = {}
    final = None
    try:
        while True:
            try:
                item = events.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is done:
                break
            if isinstance(item, UserError):
                printer.line(f"error: {item}", "red")
            elif isinstance(item, Exception):
                printer.line(f"error: {type(item).__name__}: {item}", "red")
            elif isinstance(item, Notice):
                printer.line(f"note: {item.text}", "yellow")
            elif isinstance(item, ToolStarted):
                started[item.id] = time.monotonic()
                printer.line(f"  > {item.name} {step_args(item.args)}", "dim")
            elif isinstance(item, ToolFinished):
                took = time.monotonic() - started.pop(item.id, time.monotonic())
                printer.line(f"  < {item.name}: {step_result(item.name, item.ok, item.data, item.error)} ({took:.1f} s)",
                             "dim" if item.ok else "red")
            elif isinstance(item, TextDelta):
                printer.raw(item.text)
                streamed = True
            elif isinstance(item, Failed):
                printer.line(f"error: {item.error}", "red")
            elif isinstance(item, Final):
                final = item.answer
                printer.answer(final, streamed=streamed)
    except KeyboardInterrupt:
        cancel.set()
        printer.line("\n[stopped]", "yellow")
        return None
    return final


def handle_command(conv: Session, line: str, printer: Printer) -> bool:
    """Run a ``/command``; False means quit."""
    try:
        parts = shlex.split(line)
    except ValueError as exc:
        printer.line(f"error: {exc}", "red")
        return True
    cmd, args = parts[0], parts[1:]
    try:
        if cmd == "/quit":
            return False
        if cmd == "/help":
            printer.line(HELP)
        elif cmd == "/attach":
            if not args:
                raise UserError("/attach needs at least one path")
            added = conv.attach(*args)
            printer.line("attached: " + (", ".join(str(p) for p in added) or "(already attached)"))
        elif cmd == "/detach":
            dropped = conv.detach(*args)
            printer.line("detached: " + (", ".join(str(p) for p in dropped) or "nothing"))
        elif cmd == "/reset":
            conv.reset()
            printer.line("conversation reset (attachments kept)")
        elif cmd == "/save":
            if len(args) != 1:
                raise UserError("/save needs one file name")
            from rlmedic.confine import write_new_text
            from rlmedic.ui.render import session_markdown

            path = write_new_text(args[0], session_markdown(conv))
            printer.line(f"saved to {path}")
        elif cmd == "/offline":
            conv.offline = True
            printer.line("offline engine: answers come from the tools, playbook cards and docs (no LLM)")
        elif cmd == "/online":
            conv.offline = False
            printer.line("online: the model server answers when it is reachable (offline engine otherwise)")
        else:
            raise UserError(f"unknown command {cmd}; /help lists them")
    except UserError as exc:
        printer.line(f"error: {exc}", "red")
    return True


def _prompt_session() -> Any:
    """A prompt_toolkit session: history in the data dir, commands and paths completed."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import Completer, Completion, PathCompleter, WordCompleter
    from prompt_toolkit.document import Document
    from prompt_toolkit.history import FileHistory

    from rlmedic.settings import data_dir

    words = WordCompleter(list(COMMANDS), sentence=True)
    paths = PathCompleter(expanduser=True)

    class ChatCompleter(Completer):
        def get_completions(self, document: Document, complete_event: Any):  # noqa: ANN201
            text = document.text_before_cursor
            if text.startswith(("/attach ", "/detach ", "/save ")):
                word = text.split(" ")[-1]
                yield from paths.get_completions(Document(word, len(word)), complete_event)
            elif text.startswith("/"):
                yield from words.get_completions(document, complete_event)
            else:
                return
                yield Completion("")  # pragma: no cover - keeps this a generator

    history = None
    try:
        from rlmedic.settings import private_file

        home = data_dir()
        home.mkdir(parents=True, exist_ok=True)
        private_file(home / "chat_history", "a").close()  # created 0600 before prompt_toolkit appends to it
        history = FileHistory(str(home / "chat_history"))
    except OSError:
        pass
    return PromptSession(history=history, completer=ChatCompleter(), complete_while_typing=False)


def chat_loop(conv: Session, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
              interactive: bool | None = None) -> int:
    """The REPL (interactive) or the line-by-line reader (piped). Returns the exit code."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    if interactive is None:
        interactive = stdin.isatty() and stdout.isatty()
    printer = Printer(stdout, rich=interactive)
    if interactive and threading.current_thread() is threading.main_thread():
        import signal

        # started from a background job or nohup, Python inherits SIGINT ignored; at a terminal
        # Ctrl-C must still stop an answer (KeyboardInterrupt), as the prompt promises
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    intro = "rlmedic chat: ask about a failed run; /help for commands, /attach to add logs and configs."
    printer.line(intro, "bold")
    if conv.offline:
        printer.line("offline engine: answers come from the tools, playbook cards and docs (no LLM)", "yellow")
    session = _prompt_session() if interactive else None
    while True:
        try:
            if session is not None:
                line = session.prompt("rlmedic> ")
            else:
                line = stdin.readline()
                if not line:
                    break
        except KeyboardInterrupt:
            continue  # Ctrl-C at the prompt clears the line
        except EOFError:
            break
        line = line.strip()
        if not line:
            continue
        if line.startswith("/"):
            if not handle_command(conv, line, printer):
                break
            continue
        if session is None:
            printer.line(f"? {line}")
        try:
            run_question(conv, line, printer)
        except UserError as exc:
            printer.line(f"error: {exc}", "red")
    return 0
