"""slime launch arguments: from a run script (bash arrays, ``ray job submit``) or a plain list.

slime is configured with command-line flags, usually collected in bash arrays
(``ROLLOUT_ARGS=( --rollout-batch-size 32 ... )``) and expanded into
``python3 train.py ${ROLLOUT_ARGS[@]} ...``. :func:`parse_slime_launch` reads such a
script without running it: it tokenises the shell text, records bash arrays and simple
variables, finds the ``train.py``/``train_async.py`` command and expands the arrays into
an ordered flag list whose every token knows its line and column. Edits (set, add,
remove a flag) patch those spans in the text, so the corrected script differs from the
original only where it must.

Values are resolved the way bash would at the point of the command, from the script
alone (the process environment is never read): plain ``NAME=value`` assignments made
earlier in the script (``export NAME=value`` too), ``$NAME``, ``${NAME}``,
``${NAME:-default}`` and ``${NAME:=default}`` (the default when NAME is not assigned in
the script, or is empty; ``:=`` also assigns it). Anything else (command substitution,
arithmetic, other parameter expansions, variables the script never assigns) is left as
written.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.config.editable import EditableText
from rlmedic.tools.config.rules import config_finding
from rlmedic.types import Finding

TRAIN_ENTRIES = ("train_async.py", "train.py")
_ARRAY_REF = re.compile(r'^"?\$\{(\w+)\[[@*]\]\}"?$')
_ASSIGN = re.compile(r"^(?:export\s+)?(\w+)(\+?)=(.*)$", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")
_BRACED = re.compile(r"([A-Za-z_]\w*)(?:(:[-=])(.*))?", re.DOTALL)
_DEFAULT_EXPANSION = re.compile(r"\$\{([A-Za-z_]\w*):[-=]")
_DECLARE = ("export",)
_PLACEHOLDERS = ("...", "\u2026")


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start`` (nested braces counted)."""
    level = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            level += 1
        elif text[i] == "}":
            level -= 1
            if level == 0:
                return i
    return None


def expand_shell(value: str, env: dict[str, str]) -> str:
    """Expand ``$X``, ``${X}``, ``${X:-default}`` and ``${X:=default}`` from ``env`` (``:=`` assigns into it).

    A variable missing from ``env`` without a default, and every other form, stays as written.
    """
    if "$" not in value:
        return value
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        if value[i + 1] == "{":
            end = _closing_brace(value, i + 1)
            if end is None:
                out.append(value[i:])
                break
            text = value[i : end + 1]
            m = _BRACED.fullmatch(value[i + 2 : end])
            if m:
                name, op, word = m.groups()
                current = env.get(name)
                if op is None:
                    text = current if current is not None else text
                elif current:  # set and not empty
                    text = current
                else:
                    text = expand_shell(word, env)
                    if op == ":=":
                        env[name] = text
            out.append(text)
            i = end + 1
            continue
        m = _NAME.match(value, i + 1)
        if m:
            out.append(env[m.group(0)] if m.group(0) in env else value[i : m.end()])
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _resolve(tok: Token, env: dict[str, str]) -> str:
    """The token's value after expansion (single-quoted text is literal)."""
    return tok.value if tok.text.startswith("'") else expand_shell(tok.value, env)


@dataclass
class Token:
    text: str  # as written
    value: str  # quotes removed
    line: int  # 0-based
    col: int
    end_line: int
    end_col: int


_QUOTING = re.compile(r"['\"\\\\]")
_PLAIN_RUN = re.compile(r"[^\\'\"$( \t\r\n;|&)#]+")  # characters a word can hold with no special meaning


def _unquote(text: str) -> str:
    if _QUOTING.search(text) is None:  # nothing to unquote: skip shlex (the cost of long scripts)
        return text
    try:
        parts = shlex.split(text, comments=False, posix=True)
    except ValueError:
        return text
    return " ".join(parts) if parts else ""


def tokenize(text: str) -> list[list[Token]]:
    """Split shell text into statements of tokens; newlines end statements except inside ``( ... )`` arrays."""
    statements: list[list[Token]] = []
    current: list[Token] = []
    depth_array = 0
    i, line, col = 0, 0, 0
    n = len(text)

    def advance(k: int = 1) -> None:
        nonlocal i, line, col
        for _ in range(k):
            if i < n and text[i] == "\n":
                line, col = line + 1, 0
            else:
                col += 1
            i += 1

    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":  # a line continuation: the hot path of long scripts
            i, line, col = i + 2, line + 1, 0
            continue
        if ch in " \t\r":
            j = i + 1
            while j < n and text[j] in " \t\r":
                j += 1
            col += j - i
            i = j
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                advance()
            continue
        if ch == "\n" or ch == ";":
            if depth_array == 0 and current:
                statements.append(current)
                current = []
            advance()
            continue
        if ch == ")" and depth_array:
            depth_array -= 1
            current.append(Token(")", ")", line, col, line, col + 1))
            advance()
            continue
        if text.startswith("&&", i) or text.startswith("||", i) or ch == "|" or ch == "&":
            if depth_array == 0 and current:
                statements.append(current)
                current = []
            advance(2 if text.startswith(("&&", "||"), i) else 1)
            continue
        # a word
        start_i, start_line, start_col = i, line, col
        emitted = False
        while i < n:
            run = _PLAIN_RUN.match(text, i)
            if run:  # ordinary characters, no newline among them: skip them in one step
                col += run.end() - i
                i = run.end()
                continue
            c = text[i]
            if c == "\\" and i + 1 < n:
                if text[i + 1] == "\n":
                    break
                advance(2)
                continue
            if c in "'\"":
                quote = c
                advance()
                while i < n and text[i] != quote:
                    if quote == '"' and text[i] == "\\":
                        advance()
                    advance()
                advance()
                continue
            if c == "$" and i + 1 < n and text[i + 1] in "({":
                opener, close = text[i + 1], ")" if text[i + 1] == "(" else "}"
                advance(2)
                level = 1
                while i < n and level:
                    if text[i] == opener:
                        level += 1
                    elif text[i] == close:
                        level -= 1
                    advance()
                continue
            if c == "(" and text[start_i:i].endswith("="):
                # NAME=( ... ): an array; its items are tokens of this statement until ')'
                word = text[start_i:i]
                current.append(Token(word, word, start_line, start_col, line, col))
                current.append(Token("(", "(", line, col, line, col + 1))
                depth_array += 1
                advance()
                emitted = True
                break
            if c in " \t\r\n;|&" or (c == ")" and depth_array):
                break
            advance()
        word = text[start_i:i]
        if word and not emitted:
            current.append(Token(word, _unquote(word), start_line, start_col, line, col))
    if current:
        statements.append(current)
    return statements


@dataclass
class FlagOccurrence:
    flag: str
    values: list[str]
    flag_token: Token
    value_tokens: list[Token]
    inline_value: bool = False  # --flag=value
    source: str = ""  # array name, or "" for the command line itself
    resolved: list[str] = field(default_factory=list)  # values with shell variables expanded where the script allows

    @property
    def value(self) -> str | None:
        return " ".join(self.values) if self.values else None

    @property
    def line(self) -> int:
        return self.flag_token.line + 1


@dataclass
class SlimeLaunch(EditableText):
    """A parsed slime launch: the training entry point and its flags, in order."""

    path: str
    original: str
    text: str = ""
    entry: str | None = None  # train.py | train_async.py | None (plain argument list)
    flags: list[FlagOccurrence] = field(default_factory=list)
    arrays: dict[str, list[Token]] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)  # as they stand at the training command, expanded
    assignments: dict[str, Token] = field(default_factory=dict)  # NAME=value tokens, for editing through a variable
    array_values: dict[str, list[str]] = field(default_factory=dict)  # array items expanded when they were assigned
    _history: list[tuple[str, Token, str]] = field(default_factory=list, repr=False)  # (name, token, value) in order
    cluster_gpus: int | None = None  # from `ray start --head ... --num-gpus N` on a one-node script
    problems: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.text:
            self.text = self.original
        self._parse()

    # ---- parsing

    def _parse(self) -> None:
        self.flags, self.arrays, self.variables, self.problems, self.assignments = [], {}, {}, [], {}
        self.array_values, self._history = {}, []
        self.entry, self.cluster_gpus = None, None
        statements = tokenize(self.text)
        command: list[tuple[Token, str, str]] | None = None
        loose: list[tuple[Token, str, str]] = []
        ray_gpus: int | None = None
        env = self.variables  # bash's view of the script's variables, statement by statement
        for stmt in statements:
            head = stmt[0]
            match = _ASSIGN.match(head.text)
            if match and len(stmt) >= 2 and stmt[1].text == "(":
                if command is not None:
                    continue  # assigned after the training command: does not reach it
                name, plus = match.group(1), match.group(2)
                body = [t for t in stmt[2:] if t.text != ")"]
                values = [_resolve(t, env) for t in body]  # bash expands array items when it assigns them
                self.arrays[name] = (self.arrays.get(name, []) if plus else []) + body
                self.array_values[name] = (self.array_values.get(name, []) if plus else []) + values
                continue
            assigns = stmt[1:] if head.text in _DECLARE and len(stmt) > 1 else stmt
            if all(_ASSIGN.match(t.text) for t in assigns):  # NAME=value ... (export NAME=value ...)
                if command is None:
                    for tok in assigns:
                        m = _ASSIGN.match(tok.text)
                        raw = m.group(3)
                        value = _unquote(raw) if raw.startswith("'") else expand_shell(_unquote(raw), env)
                        env[m.group(1)] = (env.get(m.group(1), "") if m.group(2) else "") + value
                        self.assignments[m.group(1)] = tok
                        self._history.append((m.group(1), tok, env[m.group(1)]))
                continue
            if command is not None:
                continue  # after the training command: nothing here reaches it
            words = [t.value for t in stmt]
            if "ray" in words[:2] and "start" in words[:3]:
                for i, w in enumerate(words):
                    if w == "--num-gpus" and i + 1 < len(words):
                        ray_gpus = _to_int(expand_shell(words[i + 1], env))
                    elif w.startswith("--num-gpus="):
                        ray_gpus = _to_int(expand_shell(w.split("=", 1)[1], env))
                continue
            entry_at = next((i for i, t in enumerate(stmt) if t.value.endswith(TRAIN_ENTRIES)), None)
            if entry_at is not None:
                self.entry = next(e for e in TRAIN_ENTRIES if stmt[entry_at].value.endswith(e))
                command = self._expand_tokens(stmt[entry_at + 1 :], env)
                continue
            loose += self._expand_tokens(stmt, env)
        if command is None:
            # no training command: a list of flags, or a file of argument arrays another script sources
            spliced = [(t, name, v) for name, toks in self.arrays.items()
                       for t, v in zip(toks, self.array_values[name], strict=True)]
            command = spliced + loose
            if not any(t.value.startswith("--") for t, _s, _r in command):
                self.problems.append(config_finding(key="", message="no slime flags found (expected a train.py/train_async.py "
                                             "command or a list of --flags)", severity="warning", rule="slime-parse"))
        self.flags = _collect_flags(command, self)
        if ray_gpus is not None and (self.get_int("--actor-num-nodes") or 1) == 1:
            self.cluster_gpus = ray_gpus

    def _expand_tokens(self, tokens: list[Token], env: dict[str, str]) -> list[tuple[Token, str, str]]:
        """(token, array it came from, its expanded value), arrays spliced in, left to right as bash does."""
        out: list[tuple[Token, str, str]] = []
        for tok in tokens:
            ref = _ARRAY_REF.match(tok.text)
            if ref and ref.group(1) in self.arrays:
                name = ref.group(1)
                out += [(t, name, v) for t, v in zip(self.arrays[name], self.array_values[name], strict=True)]
            else:
                out.append((tok, "", _resolve(tok, env)))
        return out

    def expand(self, value: str) -> str:
        """Substitute ``$X``/``${X}``/``${X:-default}``/``${X:=default}`` from the script's own assignments
        (as they stand at the training command); the process environment is never read."""
        return expand_shell(value, dict(self.variables))

    # ---- reading

    def occurrences(self, flag: str) -> list[FlagOccurrence]:
        return [f for f in self.flags if f.flag == flag]

    def has(self, flag: str) -> bool:
        return bool(self.occurrences(flag))

    def get(self, flag: str) -> str | None:
        """The value of the last occurrence (argparse semantics), variables expanded."""
        occ = self.occurrences(flag)
        if not occ or not occ[-1].values:
            return None
        return " ".join(occ[-1].resolved)

    def get_int(self, flag: str) -> int | None:
        return _to_int(self.get(flag))

    def value(self, flag: str) -> Any:
        """The value in effect: the script's own (last occurrence, variables expanded), else the default
        slime, Megatron-LM or SGLang gives the flag (``slime_schema.json``). A switch is ``True`` when
        present, else its default."""
        from rlmedic.tools.config.slime_flags import default_of, spec

        entry = spec(flag) or {}
        if not self.has(flag):
            return default_of(flag)
        if entry.get("nargs") == 0:
            return entry.get("action") != "store_false"
        value = self.get(flag)
        kind = {"int": int, "float": float}.get(entry.get("type", ""))
        if kind is not None and value is not None and entry.get("nargs") in (None, "?"):
            try:
                return kind(value)
            except ValueError:
                return value  # a value the script computes at run time, as written
        return value

    def value_int(self, flag: str) -> int | None:
        value = self.value(flag)
        return value if isinstance(value, int) and not isinstance(value, bool) else _to_int(value)

    def line(self, flag: str) -> int | None:
        occ = self.occurrences(flag)
        return occ[-1].line if occ else None

    def as_args(self) -> list[str]:
        out: list[str] = []
        for f in self.flags:
            out.append(f.flag)
            out += f.resolved
        return out


    # ---- editing

    def set_flag(self, flag: str, value: Any) -> None:
        """Set the value of ``flag`` (its last occurrence); adds the flag when absent."""
        occ = self.occurrences(flag)
        if not occ:
            self.add_flag(flag, value)
            return
        last = occ[-1]
        new = _quote(value)
        self._refuse_expansion(last, new)
        lines = self.text.splitlines(keepends=True)
        if last.inline_value:
            tok = last.flag_token
            row = lines[tok.line]
            eq = row.index("=", tok.col)
            lines[tok.line] = row[: eq + 1] + new + row[tok.end_col :]
        elif len(last.value_tokens) == 1 and self._variable_of(last.value_tokens[0]):
            # --save ${SAVE_DIR}: change the assignment, so every use of the variable follows
            tok = self.assignments[self._variable_of(last.value_tokens[0])]
            row = lines[tok.line]
            eq = row.index("=", tok.col)
            lines[tok.line] = row[: eq + 1] + new + row[tok.end_col :]
        elif len(last.value_tokens) == 1 and last.value_tokens[0].line == last.value_tokens[0].end_line:
            tok = last.value_tokens[0]
            row = lines[tok.line]
            lines[tok.line] = row[: tok.col] + new + row[tok.end_col :]
        elif not last.value_tokens:
            tok = last.flag_token
            row = lines[tok.line]
            lines[tok.line] = row[: tok.end_col] + " " + new + row[tok.end_col :]
        else:
            raise UserError(f"{self.path}: {flag} has several values; edit it by hand")
        self._commit("".join(lines), flag, value)

    def _refuse_expansion(self, occ: FlagOccurrence, new: str) -> None:
        """A value that comes from a shell default (``${X:-d}``, ``${X:=d}``, or ``$X`` assigned one) is not
        rewritten as a literal, which would drop the override: say exactly what to change instead."""
        if occ.inline_value:
            tok, text = occ.flag_token, occ.flag_token.text.split("=", 1)[1]
        elif len(occ.value_tokens) == 1:
            tok = occ.value_tokens[0]
            text = tok.text
        else:
            return
        where = f"{occ.flag} is {text} (line {tok.line + 1})"
        if _DEFAULT_EXPANSION.search(text) is None:
            var = None if occ.inline_value else self._variable_of(tok)
            assigned = self.assignments[var] if var else None
            if assigned is None or _DEFAULT_EXPANSION.search(assigned.text) is None:
                return  # a literal, or an assignment without a default: edited as text, as before
            tok, text = assigned, assigned.text.split("=", 1)[1]
            where += f", assigned {assigned.text} at line {tok.line + 1}"
        name = _DEFAULT_EXPANSION.search(text).group(1)
        earlier = [(t, v) for n, t, v in self._history if n == name and (t.line, t.col) < (tok.line, tok.col)]
        bare = text.strip("\"'")
        head = _DEFAULT_EXPANSION.match(bare)
        if not head or _closing_brace(bare, 1) != len(bare) - 1:  # part of a longer word: no single default to name
            advice = f"change {text} so that it gives {new}"
        elif earlier and earlier[-1][1]:
            assignment = earlier[-1][0]
            advice = (f"{name} is assigned {assignment.text} at line {assignment.line + 1}, so the default is not "
                      f"used: change that assignment to {name}={new}")
        else:
            advice = f"change {bare} to {bare[: head.end()]}{new}}} (or assign {name}={new} before it)"
        raise UserError(f"{self.path}: {where}, a shell default: {advice}; edit it by hand")

    def _variable_of(self, tok: Token) -> str | None:
        match = re.fullmatch(r'"?\$\{?(\w+)\}?"?', tok.text)
        if match and match.group(1) in self.assignments:
            head = self.assignments[match.group(1)]
            if head.line == head.end_line:
                return match.group(1)
        return None

    def add_flag(self, flag: str, value: Any = None, near: str | None = None) -> None:
        """Insert ``flag [value]`` next to ``near`` (or after the last flag), on its own line when the script has one flag per line."""
        if self.has(flag):
            if value is not None and value is not True:
                self.set_flag(flag, value)
            return
        anchor = (self.occurrences(near)[-1] if near and self.has(near) else None) or (self.flags[-1] if self.flags else None)
        piece = flag if value is None or value is True else f"{flag} {_quote(value)}"
        lines = self.text.splitlines(keepends=True)
        if anchor is None:
            if not lines or lines[-1].endswith("\n"):
                lines.append(piece + "\n")
            else:
                lines[-1] += " " + piece
            self._commit("".join(lines), flag, value)
            return
        last = anchor.value_tokens[-1] if anchor.value_tokens else anchor.flag_token
        if last.end_line >= len(lines):  # the command ends in a dangling quote or continuation
            raise UserError(f"{self.path}: cannot place {flag} after {anchor.flag} as text; add it by hand")
        row = lines[last.end_line]
        rest = row[last.end_col :]
        rest_code = rest.split("#", 1)[0].strip()
        if rest_code in ("", "\\") and anchor.flag_token.line == last.end_line and _line_starts_with(lines[anchor.flag_token.line], anchor.flag_token.col):
            indent = lines[anchor.flag_token.line][: anchor.flag_token.col]
            continuation = " \\" if rest_code == "\\" else ""
            newline = "\n" if row.endswith("\n") else ""
            if not newline:
                lines[last.end_line] = row + "\n"
            lines.insert(last.end_line + 1, f"{indent}{piece}{continuation}\n")
        else:
            lines[last.end_line] = row[: last.end_col] + " " + piece + row[last.end_col :]
        self._commit("".join(lines), flag, value)

    def rename_flag(self, flag: str, new: str) -> None:
        """Rename every occurrence of ``flag`` to ``new`` (a misspelt flag), values untouched."""
        if not self.has(flag):
            raise UserError(f"{self.path}: {flag} is not in the script")
        lines = self.text.splitlines(keepends=True)
        for occ in sorted(self.occurrences(flag), key=lambda o: (o.flag_token.line, o.flag_token.col), reverse=True):
            tok = occ.flag_token
            row = lines[tok.line]
            start = row.find(flag, tok.col)
            if start < 0 or tok.line != tok.end_line:
                raise UserError(f"{self.path}: cannot rename {flag} as text; edit it by hand")
            lines[tok.line] = row[:start] + new + row[start + len(flag):]
        previous = self.text
        self._set_text("".join(lines))
        if self.has(flag) or not self.has(new):
            self._set_text(previous)
            raise UserError(f"{self.path}: could not rename {flag} to {new}; edit it by hand")

    def remove_value(self, flag: str) -> None:
        """Drop the value(s) given to a switch (``--colocate true`` -> ``--colocate``)."""
        occ = self.occurrences(flag)
        if not occ or not occ[-1].value_tokens:
            return
        last = occ[-1]
        first_tok, last_tok = last.value_tokens[0], last.value_tokens[-1]
        if last.inline_value or first_tok.line != last_tok.end_line or first_tok.line != last.flag_token.line:
            raise UserError(f"{self.path}: {flag} has a value on another line; remove it by hand")
        lines = self.text.splitlines(keepends=True)
        row = lines[first_tok.line]
        lines[first_tok.line] = row[: last.flag_token.end_col] + row[last_tok.end_col :]
        self._set_text("".join(lines))
        if self.occurrences(flag) and self.occurrences(flag)[-1].values:
            raise UserError(f"{self.path}: could not remove the value of {flag}; edit it by hand")

    def remove_flag(self, flag: str) -> None:
        """Remove every occurrence of ``flag`` and its values."""
        while self.has(flag):
            occ = self.occurrences(flag)[-1]
            lines = self.text.splitlines(keepends=True)
            first = occ.flag_token
            last = occ.value_tokens[-1] if occ.value_tokens else occ.flag_token
            if first.line != last.end_line:
                raise UserError(f"{self.path}: {flag} spans several lines; remove it by hand")
            row = lines[first.line]
            before, after = row[: first.col], row[last.end_col :]
            after_code = after.split("#", 1)[0].strip()
            if not before.strip() and after_code in ("", "\\"):
                prev_continues = first.line > 0 and lines[first.line - 1].rstrip().endswith("\\")
                if after_code == "" and prev_continues:
                    # the line above continued into this one: end the command there instead
                    lines[first.line - 1] = re.sub(r"\s*\\\s*$", "\n", lines[first.line - 1])
                del lines[first.line]
            else:
                lines[first.line] = before.rstrip(" ") + (" " if before.strip() and after.strip() else "") + after.lstrip(" ")
                if not before.strip():
                    lines[first.line] = before + after.lstrip(" ")
            self._set_text("".join(lines))
            if any(o.flag_token.line == occ.flag_token.line and o.flag_token.col == occ.flag_token.col for o in self.occurrences(flag)):
                raise UserError(f"{self.path}: could not remove {flag}")

    def _set_text(self, text: str) -> None:
        self.text = text
        self._parse()

    def _commit(self, text: str, flag: str, value: Any) -> None:
        previous = self.text
        self._set_text(text)
        got = self.get(flag)
        want = None if value is None or value is True else str(value)
        if not self.has(flag) or (want is not None and got != want and _unquote(_quote(value)) != got):
            self._set_text(previous)
            raise UserError(f"{self.path}: could not set {flag} to {value!r} as a text edit; edit it by hand")


def _line_starts_with(row: str, col: int) -> bool:
    return not row[:col].strip()


def _quote(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return shlex.quote(str(value))


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _collect_flags(tokens: list[tuple[Token, str, str]], launch: SlimeLaunch) -> list[FlagOccurrence]:
    flags: list[FlagOccurrence] = []
    current: FlagOccurrence | None = None
    for tok, source, resolved in tokens:
        value = tok.value
        if value in _PLACEHOLDERS or _ARRAY_REF.match(tok.text):
            # an elision in a documented command, or an array the script never defines here (sourced from
            # another file): it holds flags of its own, so it ends the current flag's values
            current = None
            continue
        if value.startswith("--") and len(value) > 2:
            if "=" in value:
                name, inline = value.split("=", 1)
                inline_resolved = resolved.split("=", 1)[1] if resolved.startswith(name + "=") else inline
                current = FlagOccurrence(name, [inline], tok, [], inline_value=True, source=source,
                                         resolved=[inline_resolved])
                flags.append(current)
                current = None
                continue
            current = FlagOccurrence(value, [], tok, [], source=source)
            flags.append(current)
        elif current is not None:
            current.values.append(value)
            current.value_tokens.append(tok)
            current.resolved.append(resolved)
    return flags


def parse_slime_launch(text: str, path: str = "<string>") -> SlimeLaunch:
    return SlimeLaunch(path=path, original=text)


def parse_slime_args(argv: list[str], path: str = "<args>") -> SlimeLaunch:
    """A plain argument list (as ``sys.argv[1:]`` of ``train.py``), one flag per line."""
    lines: list[str] = []
    for arg in argv:
        if arg.startswith("--") or not lines:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return SlimeLaunch(path=path, original="\n".join(lines) + "\n")


def load_slime_launch(path: str | os.PathLike[str], *, confinement: Confinement) -> SlimeLaunch:
    return parse_slime_launch(confinement.read_text(path, whole=True), str(path))


def looks_like_slime(text: str) -> bool:
    """A run script or argument file for slime (rather than an AReaL YAML)?"""
    if re.search(r"\btrain(_async)?\.py\b", text) and "--" in text:
        return True
    return bool(re.search(r"--(rollout-batch-size|n-samples-per-prompt|actor-num-gpus-per-node|hf-checkpoint|colocate)\b", text))
