"""Fuzzing the parsers and tools with hypothesis: a result or a UserError, never another exception,
never a hang, bounded memory.

Targets, through their public functions and through the CLI: the log scanner (``diagnose``,
``diagnose_text``, ``build_excerpt``), the AReaL and slime parsers, the config rules and the
fixer (``lint_parsed``, ``fix_parsed``), the GPU snapshot loader (``load_snapshot``), the
checkpoint scanner (``list_checkpoints`` + ``recovery_plan``), and issue 21's inputs: Slack's
``Content-Length`` (``body_length``), redaction through terminal escape codes, tool paths with a
NUL byte, and chunk ids of repeating text.

Inputs are built from nasty fragments (aliases, merge keys, tags, deep brackets, long digit
runs, line continuations, quotes, NUL and invalid UTF-8, ANSI codes) mixed into real fixture
files, and from generated JSON. The run is fixed: ``derandomize`` with the seed below (set
``RLMEDIC_FUZZ_SEED`` to explore others); a failure prints the seed and the falsifying input.
The budget (``max_examples`` per target) keeps the whole file well under a minute on two
cores; each example runs under a watchdog (a hang fails it), and the process's peak RSS
(``VmHWM``, reset before the first target) may grow by at most :data:`RSS_GROWTH_MB`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st
from conftest import ANYWHERE
from typer.testing import CliRunner

from rlmedic.errors import UserError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HOSTILE = FIXTURES / "hostile"
SEED = int(os.environ.get("RLMEDIC_FUZZ_SEED", "20261123"))
RSS_GROWTH_MB = 300

FUZZ = settings(
    max_examples=60,
    deadline=None,  # wall-clock timings on a shared CI machine are noise; the watchdog below catches hangs
    derandomize="RLMEDIC_FUZZ_SEED" not in os.environ,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith(field + ":")))


@pytest.fixture(scope="module", autouse=True)
def _rss_baseline() -> Iterator[None]:
    """Reset this process's peak-RSS mark (``VmHWM``) before the fuzz targets, so the last test sees
    their own peak, not that of whatever ran earlier in the session."""
    global _RSS_AT_START
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # 5: reset the peak RSS to the current RSS
        _RSS_AT_START = _status_kb("VmRSS")
    except OSError:  # no reset: only growth above the session's earlier peak can be seen
        _RSS_AT_START = _status_kb("VmHWM")
    yield


_RSS_AT_START = 0


#: Seconds one example may run before it counts as a hang (generous: the machine may be shared).
HANG_S = 60


class Hang(Exception):
    pass


@contextlib.contextmanager
def _example() -> Iterator[None]:
    """Note the seed (printed with a failing example) and fail the example if it runs past :data:`HANG_S`."""
    note(f"fuzz seed {SEED} (rerun with RLMEDIC_FUZZ_SEED={SEED}; derandomized unless it is set)")

    def alarm(_signum: int, _frame: Any) -> None:
        raise Hang(f"one example ran past {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _result_or_user_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``: a result, or None for a UserError. Any other exception fails the example."""
    try:
        return fn(*args, **kwargs)
    except UserError as exc:
        assert "\n" not in str(exc).strip(), f"a UserError must be one line: {exc!r}"
        return None


# --------------------------------------------------------------------------- strategies

YAML_FRAGMENTS = [
    "&a ", "*a", "<<: *a", "<<: [*a, *a]", "&b [*a, *a, *a]", "!!float x", "!!int 0x", "!!bool maybe", "!!timestamp 2020-99-99",
    "!!binary @@", "!!set", "!!omap", "!foo", "!!python/object:os.system", "[", "]", "{", "}", "[[[[[[[[", "{a: {b: {c:",
    "? ", ": ", "- ", "---\n", "...\n", "%YAML 1.2\n", "#", "'", '"', "\\", "|", ">", "\t", "\x00", "\ufeff", "é", "1" * 120,
    "1e999", "-.inf", ".nan", "null", "~", "${actor.path}", "${oc.env:HOME}", "${a}", "a.b.c", "\"x.y\": 1",
    "actor.optimizer.lr", "allocation_mode: ", "sglang:d4t2+fsdp:d8", "megatron:(attn:d2|ffn:e2)", "rollout.backend: ",
    "cluster:\n  fileroot: ", "\n  ", "\n    - ", "\n",
]
SLIME_FRAGMENTS = [
    " \\\n", "\\", "'", '"', "$(", "${X:-", "${X:=1}", "$X", "(", ")", ";", "&&", "||", "|", "&", "#", "=", "--", " --tp ",
    "--tensor-model-parallel-size", " 0 ", " -1 ", " 99999999999999999999999 ", "ARGS=(", "export ", "\n", "\t", "\x00", "é",
    "--colocate", "--rollout-num-gpus-per-engine 3", "--max-tokens-per-gpu", "ray job submit -- ", "python3 train.py ",
]
LOG_FRAGMENTS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 99999999999999999999999 GiB.",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000)",
    "grad_norm: nan", "Traceback (most recent call last):", "  File \"x.py\", line 1, in <module>",
    "(RolloutWorker pid=123) ", "\x1b[31m", "\x1b[0m", "\r", "\x00", "\ufffd", "é", "x" * 3000, "2026-01-01 00:00:00",
    "I0101 00:00:00.000000 ", "step 9999999999999999999999: loss=1e999", "Killed", "SIGKILL", "ray.exceptions.RayActorError",
]


def _mixed(fragments: list[str]) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(fragments), st.text(max_size=12))
    return st.lists(piece, max_size=40).map("".join)


def _spliced(base: str, fragments: list[str]) -> st.SearchStrategy[str]:
    """A real file with nasty fragments inserted at a few positions."""

    @st.composite
    def build(draw: Any) -> str:
        text = base
        for _ in range(draw(st.integers(0, 6))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(fragments)) + text[at:]
        return text

    return build()


AREAL_BASES = [(FIXTURES / "configs" / "areal" / n).read_text() for n in ("base.yaml", "colocated_a40.yaml")]
SLIME_BASES = [(FIXTURES / "configs" / "slime" / n).read_text() for n in ("base.sh", "colocate_mem.sh")]
LOG_BASE = "\n".join((FIXTURES / "logs" / "scenarios" / "grad_nan_slime.log").read_text(errors="replace").splitlines()[-60:])

areal_text = st.one_of(_mixed(YAML_FRAGMENTS), *(_spliced(b, YAML_FRAGMENTS) for b in AREAL_BASES))
slime_text = st.one_of(_mixed(SLIME_FRAGMENTS), *(_spliced(b, SLIME_FRAGMENTS) for b in SLIME_BASES))
log_bytes = st.one_of(
    st.lists(st.one_of(st.sampled_from(LOG_FRAGMENTS), st.text(max_size=30)), max_size=60).map(
        lambda parts: "\n".join(parts).encode("utf-8", "surrogatepass")),
    _spliced(LOG_BASE, LOG_FRAGMENTS).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=400),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)),
    max_leaves=20,
)
SNAPSHOT_BASE = json.loads((FIXTURES / "gpu" / "h100x8_running.json").read_text())


@st.composite
def snapshot_text(draw: Any) -> str:
    """A real snapshot with some fields replaced by any JSON value, or raw nasty JSON text."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.sampled_from(["[" * 5000, "{\"gpus\": " + "[" * 300 + "]" * 300 + "}", "1" * 5000, "", "nul",
                                     "{\"version\": 1, \"gpus\": [{\"index\": " + "9" * 400 + "}]}"]))
    data = json.loads(json.dumps(SNAPSHOT_BASE))
    for _ in range(draw(st.integers(1, 4))):
        target = data
        gpus = data.get("gpus")
        if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) and draw(st.booleans()):
            target = gpus[0]
            procs = target.get("processes")
            if isinstance(procs, list) and procs and isinstance(procs[0], dict) and draw(st.booleans()):
                target = procs[0]
        if not target:
            break
        key = draw(st.sampled_from(sorted(target)))
        target[key] = draw(json_values)
    return json.dumps(data)


# --------------------------------------------------------------------------- targets


@FUZZ
@seed(SEED)
@given(text=areal_text)
def test_areal_parse_lint_fix(text: str) -> None:
    from rlmedic.tools.config.areal import parse_areal_config
    from rlmedic.tools.config.fix import fix_parsed, lint_parsed
    from rlmedic.tools.config.rules import LintContext

    with _example():
        config = _result_or_user_error(parse_areal_config, text, "fuzz.yaml")
        if config is None:
            return
        list(config.dotted_keys())
        _result_or_user_error(lint_parsed, "areal", config, LintContext())
        _result_or_user_error(fix_parsed, "areal", config.copy(), LintContext())


@FUZZ
@seed(SEED)
@given(text=slime_text)
def test_slime_parse_lint_fix(text: str) -> None:
    from rlmedic.tools.config.fix import fix_parsed, lint_parsed
    from rlmedic.tools.config.rules import LintContext
    from rlmedic.tools.config.slime import parse_slime_launch

    with _example():
        launch = _result_or_user_error(parse_slime_launch, text, "fuzz.sh")
        if launch is None:
            return
        _result_or_user_error(lint_parsed, "slime", launch, LintContext())
        _result_or_user_error(fix_parsed, "slime", parse_slime_launch(text, "fuzz.sh"), LintContext())


@FUZZ
@seed(SEED)
@given(data=log_bytes)
def test_log_scanner(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    from rlmedic.tools.logs.diagnose import diagnose, diagnose_text
    from rlmedic.tools.logs.excerpt import build_excerpt

    with _example():
        path = tmp_path_factory.mktemp("log") / "train.log"
        path.write_bytes(data)
        result = _result_or_user_error(diagnose, [path], confinement=ANYWHERE)
        if result is not None:
            json.dumps(result.to_dict(), default=str)
        _result_or_user_error(diagnose_text, data.decode("utf-8", "replace"))
        _result_or_user_error(build_excerpt, [path], max_lines=20, confinement=ANYWHERE)


@FUZZ
@seed(SEED)
@given(text=snapshot_text())
def test_gpu_snapshot_loader(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from rlmedic.tools.gpu.advice import gpu_advice
    from rlmedic.tools.gpu.snapshot import load_snapshot

    with _example():
        path = tmp_path_factory.mktemp("snap") / "gpu.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        snap = _result_or_user_error(load_snapshot, path, confinement=ANYWHERE)
        if snap is not None:
            json.dumps(snap.to_dict())
            gpu_advice(snap)


@st.composite
def checkpoint_tree(draw: Any) -> dict[str, str]:
    """Relative path -> content for a trial directory with damaged metadata files."""
    json_or_text = st.one_of(json_values.map(json.dumps), st.text(max_size=40),
                             st.sampled_from(["[" * 3000, "{\"global_step\": " + "9" * 500 + "}", "{\"global_step\": -1}"]))
    tree = {
        "recover_info/step_info.json": draw(json_or_text),
        "default/recover_checkpoint/model.safetensors": "x",
        "default/epoch0epochstep9globalstep9/model.safetensors": "x",
        "default/epoch0epochstep9globalstep9/config.json": draw(json_or_text),
        "default/epoch0epochstep9globalstep9/model.safetensors.index.json": draw(json_or_text),
    }
    if draw(st.booleans()):
        tree["../../../../slime/latest_checkpointed_iteration.txt"] = draw(st.text(max_size=20))
        tree["../../../../slime/iter_0000010/mp_rank_00/model_optim_rng.pt"] = "x"
    return tree


@FUZZ
@seed(SEED)
@given(tree=checkpoint_tree())
def test_checkpoint_scanner(tree: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    from rlmedic.tools.checkpoints.listing import list_checkpoints, recovery_plan

    with _example():
        root = tmp_path_factory.mktemp("ckpt")
        trial = root / "fileroot" / "checkpoints" / "user" / "exp" / "trial"
        for rel, content in tree.items():
            path = (trial / rel).resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        for where in (root / "fileroot", root / "slime"):
            if not where.exists():
                continue
            report = _result_or_user_error(list_checkpoints, where, confinement=ANYWHERE)
            if report is not None:
                recovery_plan(report)
                json.dumps(report.to_dict(), default=str)


# --------------------------------------------------------------------------- the CLI


@st.composite
def cli_call(draw: Any) -> tuple[str, str, str]:
    """(command, file name, file content) for one CLI run."""
    command = draw(st.sampled_from(["lint-config", "fix-config", "gpu", "diagnose", "checkpoints-config"]))
    if command in ("lint-config", "fix-config", "checkpoints-config"):
        if draw(st.booleans()):
            return command, "fuzz.yaml", draw(areal_text)
        return command, "fuzz.sh", draw(slime_text)
    if command == "gpu":
        return command, "gpu.json", draw(snapshot_text())
    return command, "train.log", draw(log_bytes).decode("utf-8", "replace")


@FUZZ
@seed(SEED)
@given(call=cli_call())
def test_cli_one_line_error_or_result(call: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    from rlmedic.ui.cli import app

    with _example():
        command, name, content = call
        where = tmp_path_factory.mktemp("cli")
        path = where / name
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        args = {"lint-config": ["lint-config", str(path), "--json"], "fix-config": ["fix-config", str(path)],
                "gpu": ["gpu", "--snapshot", str(path), "--json"], "diagnose": ["diagnose", "--json", str(path)],
                "checkpoints-config": ["checkpoints", str(where), "--config", str(path)]}[command]
        result = CliRunner().invoke(app, args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert result.exit_code in (0, 1, 2), result.output
        if result.exit_code == 2:
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("rlmedic: error: "), result.stderr


# --------------------------------------------------------------------------- issue 21's hostile inputs


@FUZZ
@seed(SEED)
@given(header=st.one_of(st.none(), st.text(max_size=30), st.integers(-10, 3 << 20).map(str),
                        st.from_regex(r"[ +-]?[0-9]{1,25}[ a-z]?", fullmatch=True)))
def test_slack_content_length(header: str | None) -> None:
    """Any Content-Length header: a length within 1 MiB, or 400/411/413 decided before reading."""
    from rlmedic.ui.slack_app import MAX_BODY_BYTES, body_length

    with _example():
        status, length = body_length(header)
        assert status in (200, 400, 411, 413)
        assert (length is not None) == (status == 200)
        if length is not None:
            assert 0 <= length <= MAX_BODY_BYTES and header.strip() == str(length).zfill(len(header.strip()))


_ESCAPES = st.sampled_from(["\x1b[0m", "\x1b[33m", "\x1b[1;31m", "\x1b[38;5;208m", "\x1b[2K", "\x1b]0;title\x07",
                            "\x1b]8;;http://x\x1b\\", "\x1bM", "\x1b[?25l"])


@FUZZ
@seed(SEED)
@given(data=st.data())
def test_redaction_sees_through_escape_codes(data: st.DataObject) -> None:
    """Colour codes anywhere in a secret-bearing line change nothing about what is redacted."""
    from rlmedic.redact import KINDS, redact

    with _example():
        text = data.draw(st.sampled_from([t for k in KINDS for t in k.positives]))
        cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
        coloured, last = "", 0
        for cut in cuts:
            coloured += text[last:cut] + data.draw(_ESCAPES)
            last = cut
        coloured += text[last:]
        assert redact(coloured) == redact(text)


@FUZZ
@seed(SEED)
@given(name=st.text(min_size=1, max_size=20), at=st.integers(0, 20))
def test_tool_paths_with_a_nul_byte(name: str, at: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A NUL anywhere in a path a tool reads: bad input (one line), never an internal error."""
    from rlmedic.tools.registry import REGISTRY, ToolContext

    with _example():
        where = tmp_path_factory.mktemp("nul")
        path = str(where / (name[:at] + "\x00" + name[at:]))
        ctx = ToolContext.for_roots([str(where)], env_roots=False)
        for tool, args in (("diagnose", {"paths": [path]}), ("lint_config", {"config": path}),
                           ("list_checkpoints", {"root": path})):
            result = REGISTRY.call(tool, args, ctx)
            assert not result.ok and "internal error" not in result.error and "\n" not in result.error.strip()


def test_fuzz_memory_stayed_bounded() -> None:
    """Runs after the targets above (file order): the process grew by less than the budget."""
    grown_mb = (_status_kb("VmHWM") - _RSS_AT_START) / 1024
    assert grown_mb < RSS_GROWTH_MB, f"peak RSS grew by {grown_mb:.0f} MB during the fuzz targets"


def test_hostile_corpus_through_the_public_functions() -> None:
    """Every file of the hostile corpus, through the loader it targets: a result or one UserError line."""
    from rlmedic.tools.config.fix import load_config
    from rlmedic.tools.gpu.snapshot import load_snapshot

    files = sorted(HOSTILE.iterdir())
    assert len(files) >= 10
    for path in files:
        loader = load_snapshot if path.suffix == ".json" else load_config
        _result_or_user_error(loader, path, confinement=ANYWHERE)
    shutil.rmtree(HOSTILE / "__pycache__", ignore_errors=True)


# after the memory check: the chunker imports llama-index, whose import alone would count as growth
@settings(FUZZ, max_examples=25)
@seed(SEED)
@given(line=st.text(alphabet="ab \t.#", min_size=1, max_size=8), repeat=st.integers(1, 6000),
       lines=st.integers(1, 3))
def test_chunk_ids_are_unique(line: str, repeat: int, lines: int) -> None:
    """Repeating text (one long line, or a few of them): every chunk of a document has its own id."""
    from rlmedic.knowledge.chunking import chunk_document

    with _example():
        text = "# Doc\n\n" + "\n".join([line * repeat] * lines) + "\n"
        chunks = chunk_document(text, "fuzz.md")
        assert len({c.id for c in chunks}) == len(chunks)
