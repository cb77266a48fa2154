"""The model's text on the web page loads nothing from outside (issue 31: remote images)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from conftest import FIXTURES
from fake_openai import FakeOpenAI, Reply
from rlmedic.agent.events import Answer
from rlmedic.ui.render import answer_markdown, model_markdown

OUTSIDE = "https://tracker.example.net/pixel.png?u=1"
HOSTILE = (f"Root cause: OOM. ![status]({OUTSIDE}) and ![ref][1]\n\n[1]: {OUTSIDE}\n"
           f'<img src="{OUTSIDE}"> <iframe src="{OUTSIDE}"></iframe> <video poster="{OUTSIDE}"></video>\n'
           "Keep `<b>code</b>` and ```\n![not an image](x)\n``` as written.")


def test_model_text_keeps_no_image_and_no_html() -> None:
    out = model_markdown(HOSTILE)
    assert "![" not in out.replace("```\n![not an image](x)\n```", "")
    for tag in ("<img", "<iframe", "<video"):
        assert tag not in out
    assert "[image: status](" + OUTSIDE + ")" in out  # still there, as a link the user may follow
    assert "`<b>code</b>`" in out and "```\n![not an image](x)\n```" in out  # code untouched


def test_the_answer_markdown_of_a_model_answer_is_safe_and_an_offline_one_unchanged() -> None:
    llm = answer_markdown(Answer(answer=HOSTILE, engine="llm"))
    assert "<img" not in llm and f"![status]({OUTSIDE})" not in llm
    offline = answer_markdown(Answer(answer="From the log: x <y> z", engine="offline"))
    assert "x <y> z" in offline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_web_page_gets_no_remote_image_from_the_model(tmp_path: Path) -> None:
    from gradio_client import Client, handle_file

    from rlmedic.agent.llm import LLMConfig
    from rlmedic.ui.web import WebSettings, launch

    log = tmp_path / "train.log"
    shutil.copy(FIXTURES / "logs" / "signatures" / "cuda-oom.log", log)
    replies = [Reply(content=HOSTILE)]
    with FakeOpenAI(replies) as server:
        port = _free_port()
        settings = WebSettings(config=LLMConfig.resolve(base_url=server.base_url), max_upload_mb=1,
                               uploads_root=tmp_path / "uploads")
        demo, sessions = launch(settings, port=port, block=False)
        try:
            client = Client(f"http://127.0.0.1:{port}/", verbose=False)
            _box, history, *_ = client.predict({"text": "why did my run die?", "files": [handle_file(str(log))]}, [],
                                               api_name="/chat")
        finally:
            demo.close()
            sessions.close_all()
    texts = "\n".join(str(m.get("content")) for m in history)
    assert "Root cause" in texts
    assert f"![status]({OUTSIDE})" not in texts and "<img" not in texts and "<iframe" not in texts
