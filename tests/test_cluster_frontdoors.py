"""A Ray address set on the web app and the Slack bot: each question re-reads the cluster (the fake dashboard
of recorded Ray 2.60 answers, on loopback) into the session's ``ray/`` folder, which the answer cites."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_ray_dashboard import FakeDashboard, recorded  # noqa: E402

NODE2 = next(n["node_id"] for n in recorded().nodes if not n["is_head_node"])[:8]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a Gradio server and two answers: ~25 s on 2 loaded cores
def test_the_web_app_reads_the_cluster_for_each_question(tmp_path: Path) -> None:
    from gradio_client import Client

    from rlmedic.ui.web import WebSettings, launch

    state = recorded()
    with FakeDashboard(state) as url:
        port = _free_port()
        demo, sessions = launch(WebSettings(offline=True, max_upload_mb=1, uploads_root=tmp_path / "uploads",
                                            ray_address=url), port=port, block=False)
        try:
            client = Client(f"http://127.0.0.1:{port}/", verbose=False)
            _box, _history, diag, *_rest = client.predict({"text": "why did my run die?", "files": []}, [], api_name="/chat")
            sources = _rest[4]
            assert "Root cause" in diag and "CUDA out of memory" in diag
            # shown by its name in the session folder: ray/node-<ip>-<id>__TrainWorker-pid..__worker-...err
            assert f"ray/node-127.0.0.1-{NODE2}__TrainWorker-pid" in sources and str(tmp_path) not in sources
            listed = sum(1 for m, p, _ in state.requests if p == "/api/v0/logs")
            client.predict({"text": "and what do I change?", "files": []}, [], api_name="/chat")
            assert sum(1 for m, p, _ in state.requests if p == "/api/v0/logs") == listed + 2  # re-read: 2 nodes again
            folders = [p for p in (tmp_path / "uploads").rglob("ray") if p.is_dir()]
            assert len(folders) == 1
            oom = next(folders[0].glob(f"node-127.0.0.1-{NODE2}__TrainWorker-pid*.err"))
            original = next(c for files in state.files.values() for n, c in files.items() if oom.name.endswith("__" + n))
            assert oom.read_bytes() == original  # appended once, not once per question
        finally:
            demo.close()
            sessions.close_all()


def test_the_slack_bot_reads_the_cluster_and_says_so_when_it_cannot(tmp_path: Path) -> None:
    from fake_slack import FakeSlack
    from test_slack import blocks_text, dispatch, final_updates, make_app, mention

    slack = FakeSlack().start()
    try:
        with FakeDashboard(recorded()) as url:
            app, _bot = make_app(slack, ray_address=url)
            assert dispatch(app, mention("why did my run die?", ts="1700000101.000100")) == 200
            slack.wait_for(lambda f: final_updates(f))
            text = blocks_text(final_updates(slack)[-1])
            assert "CUDA out of memory" in text and f"node-127.0.0.1-{NODE2}__TrainWorker-pid" in text
        # the dashboard is gone now: the next question is answered, with one line saying the cluster was not read
        assert dispatch(app, mention("and now?", ts="1700000102.000100")) == 200
        slack.wait_for(lambda f: len(final_updates(f)) >= 2)
        text = blocks_text(final_updates(slack)[-1])
        assert "Ray cluster not read" in text and "cannot reach the dashboard" in text
    finally:
        slack.stop()


def test_servers_refuse_a_bad_ray_address_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    port = _free_port()
    runner = CliRunner()
    monkeypatch.setenv("RLMEDIC_RAY_ADDRESS", f"http://127.0.0.1:{port}")
    out = runner.invoke(app, ["web", "--offline", "--port", str(_free_port())])
    assert out.exit_code == 2 and f"--ray-address http://127.0.0.1:{port}: cannot reach the dashboard" in out.output
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-test")
    out = runner.invoke(app, ["slack", "--offline", "--ray-address", f"127.0.0.1:{port}"])
    assert out.exit_code == 2 and "cannot reach the GCS" in out.output
