"""An error no signature knows: the finding quotes what the exception names, its category comes from
general rules (type x frame package x message words) or its nearest knowledge, never a per-case entry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlmedic.errors import UserError
from rlmedic.knowledge.cards import load_cards
from rlmedic.tools.logs.diagnose import diagnose_text
from rlmedic.tools.logs.nearest import by_cards
from rlmedic.tools.logs.tracebacks import parse_quotes, read_traceback

FIXTURE_CARDS = Path(__file__).parent / "fixtures" / "nearest" / "cards"


def _tb(*frames: tuple[str, str, str], exc: str) -> str:
    """A traceback in the user's own code (``/home/me/...``) ending in ``exc``."""
    lines = ["2026-11-26 10:00:00 INFO step 3 started", "Traceback (most recent call last):"]
    for path, func, code in frames:
        lines += [f'  File "{path}", line 42, in {func}', f"    {code}"]
    return "\n".join([*lines, exc]) + "\n"


def _root(text: str):
    diag = diagnose_text(text)
    assert diag.root_finding is not None, [f.id for f in diag.findings]
    return diag.root_finding


USER = "/home/me/proj/prep.py"


@pytest.mark.parametrize(
    ("text", "quoted", "name"),
    [
        (_tb((USER, "prepare", 'return row["prompt_text"]'), exc="KeyError: 'prompt_text'"),
         ["the key 'prompt_text'", 'return row["prompt_text"]'], ("key", "prompt_text")),
        (_tb((USER, "check", "assert seq_len <= max_len, (seq_len, max_len)"), exc="AssertionError: (5000, 4096)"),
         ["`seq_len <= max_len`", "seq_len, max_len", "(5000, 4096)"], None),
        (_tb((USER, "check", "assert total % world == 0"), exc="AssertionError"),
         ["`total % world == 0`", "total, world"], None),
        (_tb((USER, "<module>", "import fancy_kernels.ops"), exc="ModuleNotFoundError: No module named 'fancy_kernels.ops'"),
         ["fancy_kernels.ops"], None),
        (_tb((USER, "<module>", "from somepkg import NewThing"), exc="ImportError: cannot import name 'NewThing' from 'somepkg' (/x.py)"),
         ["'NewThing' cannot be imported from somepkg"], ("name", "NewThing")),
        (_tb((USER, "step", "n = batch.lengths"), exc="AttributeError: 'NoneType' object has no attribute 'lengths'"),
         ["NoneType object has no attribute 'lengths'"], ("attr", "lengths")),
        (_tb((USER, "load", "open(path)"), exc="FileNotFoundError: [Errno 2] No such file or directory: '/data/gsm8k/train.parquet'"),
         ["'/data/gsm8k/train.parquet'"], ("path", "/data/gsm8k/train.parquet")),
        (_tb((USER, "fwd", "h = x + y"), exc="RuntimeError: The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 2"),
         ["tensor sizes 4096 and 2048 differ at dimension 2"], ("dim", "2")),
        (_tb((USER, "fwd", "out = a @ b"), exc="RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x4096 and 2048x4096)"),
         ["8x4096 and 2048x4096"], ("a", "8x4096")),
        (_tb((USER, "fwd", "q = q.view(b, -1, 32, 128)"), exc="RuntimeError: shape '[8, -1, 32, 128]' is invalid for input of size 1000"),
         ["reshape to [8, -1, 32, 128]", "1000 elements"], ("size", "1000")),
        (_tb((USER, "score", "return fn(**kw)"), exc="TypeError: my_score() got an unexpected keyword argument 'extra_info'"),
         ["my_score() does not accept the argument 'extra_info'"], ("arg", "extra_info")),
        (_tb((USER, "score", "x = np.zeros(3)"), exc="NameError: name 'np' is not defined"),
         ["the name 'np' is not defined"], ("name", "np")),
    ],
)
def test_the_finding_quotes_what_the_exception_names(text: str, quoted: list[str], name: tuple[str, str] | None) -> None:
    root = _root(text)
    for q in quoted:
        assert q in root.summary, (q, root.summary)
    assert "verbosity" not in json.dumps(root.to_dict())  # no generic "raise log verbosity"
    assert root.fixes and str(root.fixes[0])
    if root.id != "import-error":  # a literal signature whose own detail names the module keeps its fixes
        assert root.fixes[0].rule.startswith("quote:")
    if name:
        assert root.evidence["names"][name[0]] == name[1]


def test_the_type_is_not_repeated() -> None:
    root = _root(_tb((USER, "f", 'raise RuntimeError("RuntimeError: boom happened")'),
                     exc="RuntimeError: RuntimeError: boom happened"))
    assert "RuntimeError: RuntimeError" not in root.summary
    assert root.summary.split(" (raised at")[0].count("RuntimeError") == 1, root.summary
    assert "boom happened" in root.summary


@pytest.mark.parametrize(
    ("text", "category", "rule"),
    [
        # type x message words: a module without a name the code uses is a version problem
        (_tb((USER, "build", "fully_shard.Thing"), exc="AttributeError: module 'torch.distributed.fsdp' has no attribute 'Thing'"),
         "install_env", "api-changed"),
        # message words: two settings that must agree
        (_tb((USER, "setup", "raise ValueError(msg)"), exc="ValueError: ppo_micro_batch_size (64) must be less than ppo_mini_batch_size (32)"),
         "config_constraint", "settings-disagree"),
        # type x frame package: a framework's own assert
        (_tb(("/usr/lib/python3/site-packages/megatron/core/transformer/attention.py", "__init__", "assert a == b"),
             exc="AssertionError"), "config_constraint", "framework-assert"),
        # message words: weights never loaded
        (_tb((USER, "merge", "sd = model.state_dict()"), exc="NotImplementedError: Cannot copy out of meta tensor; no data!"),
         "checkpoint_recovery", "weights-not-loaded"),
        # type x message words: a data field
        (_tb((USER, "collate", 'x = s["completion_ids"]'), exc="KeyError: 'completion_ids'"), "data_format", "data-field-missing"),
        # type x frame package: two packages of different versions
        (_tb(("/usr/lib/python3/site-packages/transformers/modeling_utils.py", "from_pretrained", "model = cls(config, **kw)"),
             exc="TypeError: __init__() got an unexpected keyword argument 'rope_scaling_type'"), "install_env", "version-mismatch"),
        # hand-trimmed frames ("... in f") and the phase the lines around say: during the weight update
        ("step 12: update_weights: sending 291 tensors to the inference engine\n  ... in quantize_params\nKeyError: 'fmt'\n",
         "weight_sync", "failed-during-weight-update"),
        # frames without line numbers, as people trim them when they paste
        ('  File ".../vllm_rollout.py", in update_weights\n  File ".../utils.py", in load_weights\n'
         "ValueError: too many values to unpack (expected 2)\n", "weight_sync", "weight-name-mismatch"),
    ],
)
def test_unknown_exception_is_categorised_by_general_rules(text: str, category: str, rule: str) -> None:
    root = _root(text)
    assert (root.category, root.evidence["classified_by"]) == (category, f"rule:{rule}"), root.summary
    assert root.card and root.fixes


def test_unknown_exception_is_categorised_by_the_nearest_card() -> None:
    cards = load_cards(FIXTURE_CARDS)
    near = by_cards(
        "jinja2.exceptions.TemplateError Conversation roles must alternate user/assistant/user/assistant/... "
        "apply_chat_template tokenization_utils_base", cards,
    )
    assert near is not None and (near.card, near.category) == ("chat-template-roles", "data_format")
    assert {"alternate", "jinja2"} <= set(near.shared)
    # far from every card: no guess
    assert by_cards("ZeroDivisionError division by zero in main", cards) is None
    assert by_cards("RuntimeError something odd happened in the widget frobnicator", cards) is None


def test_nothing_close_stays_other_and_says_so() -> None:
    root = _root(_tb((USER, "main", "r = a / n"), exc="ZeroDivisionError: division by zero"))
    assert (root.category, root.evidence["classified_by"]) == ("other", "none")
    assert "division by zero" in root.summary and "`r = a / n`" in root.summary


def test_a_bad_quote_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="does not capture"):
        parse_quotes({"quotes": [{"id": "q", "types": ["KeyError"], "message": "(?P<k>x)", "say": "{nope}"}]})
    with pytest.raises(UserError, match="unknown field"):
        parse_quotes({"quotes": [{"id": "q", "say": "x", "colour": 1}]})
    with pytest.raises(UserError, match="invalid regex"):
        parse_quotes({"quotes": [{"id": "q", "say": "x", "message": "(unclosed"}]})
    with pytest.raises(UserError, match="duplicate"):
        parse_quotes({"quotes": [{"id": "q", "say": "x"}, {"id": "q", "say": "y"}]})


def test_reader_keeps_the_source_line_of_each_frame() -> None:
    tb = read_traceback("KeyError: 'w'", [
        "Traceback (most recent call last):",
        '  File "/a.py", line 1, in f',
        "    g()",
        '  File "/b.py", line 2, in g',
        '    return d["w"]',
        "           ~^^^^^",
    ])
    assert tb is not None and [f.code for f in tb.frames] == ["g()", 'return d["w"]']
    assert tb.where == "g (b.py:2)"


def test_diagnose_stays_light() -> None:
    """No embedding model, torch or chromadb on the diagnose path, even for an error no signature knows."""
    code = (
        "import sys; from rlmedic.tools.logs.diagnose import diagnose_text; "
        "d = diagnose_text(open(sys.argv[1]).read()); "
        "heavy = sorted(m for m in ('torch', 'chromadb', 'sentence_transformers', 'langchain') if m in sys.modules); "
        "print(d.root_finding.category, heavy)"
    )
    for path in (Path(__file__).parent / "fixtures" / "logs" / "tracebacks" / "dataset-error.log",  # a rule knows it
                 Path(__file__).parent / "fixtures" / "logs" / "signatures" / "python-exception.log"):  # the nearest vote
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120, check=True)
        assert out.stdout.strip().endswith("[]"), out.stdout


FIXTURE_RECORDS = Path(__file__).parent / "fixtures" / "nearest" / "known"
PTXAS = (
    "Traceback (most recent call last):\n"
    '  File "/home/me/train.py", line 88, in step\n'
    "    out = fused(x)\n"
    "RuntimeError: ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'\n"
)


def _diagnose_with_records(tmp_path: Path, records: Path | None) -> dict:
    log = tmp_path / "t.log"
    log.write_text(PTXAS)
    env = {**__import__("os").environ, "RLMEDIC_KNOWN_ISSUES_BUILTIN": "0", "RLMEDIC_KNOWN_ISSUES": str(records or "")}
    out = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "--json", str(log)], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    data = json.loads(out.stdout)
    return data["findings"][data["root"]]


def test_unknown_exception_is_categorised_by_the_nearest_known_records(tmp_path: Path) -> None:
    """The fixture records (tests/fixtures/nearest/known) are install_env problems of ptxas: their vote decides."""
    root = _diagnose_with_records(tmp_path, FIXTURE_RECORDS)
    assert root["category"] == "install_env"
    assert root["evidence"]["classified_by"].startswith("known:triton-ptxas")
    assert any(c["kind"] == "issue" and c["ref"].startswith("example/fixture#") for c in root["citations"])
    assert "sm_121a" in root["summary"]  # still quoted
    # without those records nothing is near: it stays "other", and says what it names
    bare = _diagnose_with_records(tmp_path, None)
    assert (bare["category"], bare["evidence"]["classified_by"]) == ("other", "none")


def test_through_ask_offline_the_answer_quotes_the_exception(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_text(_tb((USER, "prepare", 'return row["prompt_text"]'), exc="KeyError: 'prompt_text'"))
    out = subprocess.run(
        [sys.executable, "-m", "rlmedic", "ask", "--offline", "--json", "why did this crash?", "--attach", str(log)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)["answer"]
    assert "the key 'prompt_text'" in answer and "verbosity" not in answer


def test_a_generic_error_string_alone_does_not_decide(tmp_path: Path) -> None:
    """A record whose only symptom is "ZeroDivisionError: division by zero" matches that line exactly, but
    anyone's code can say that: alone it does not make the user's own helper a Ray problem."""
    log = tmp_path / "t.log"
    log.write_text(_tb((USER, "moving_average", "return total / n"), exc="ZeroDivisionError: division by zero"))
    env = {**__import__("os").environ, "RLMEDIC_KNOWN_ISSUES_BUILTIN": "0",
           "RLMEDIC_KNOWN_ISSUES": str(Path(__file__).parent / "fixtures" / "nearest" / "known_generic")}
    out = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "--json", str(log)], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    data = json.loads(out.stdout)
    root = data["findings"][data["root"]]
    assert (root["category"], root["evidence"]["classified_by"]) == ("other", "none")
