"""Pictures where people look: the PNG of a finding's curves (its step marked), uploaded to the Slack
thread when a zip of a W&B run is attached (through the fake Slack Web API on loopback), shown in
the web app's diagnosis panel; the terminal's sparkline is tested in test_runs_detectors.py."""

from __future__ import annotations

import io
import shutil
import time
import zipfile
from pathlib import Path

from PIL import Image

from rlmedic.tools.runs.chart import png_chart
from rlmedic.tools.runs.diagnose import diagnose_runs, run_kind

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def _zip(folder: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(folder.parent))
    return dest


def test_png_marks_the_step_and_draws_each_curve() -> None:
    curves = {"a": [[s, float(s < 50)] for s in range(100)], "b": [[s, s * 2.0] for s in range(100)]}
    img = Image.open(io.BytesIO(png_chart(curves, 50))).convert("RGB")
    w, h = img.size
    assert w == 640 and h > 200
    x = 8 + round(50 / 99 * (w - 17))
    column = [img.getpixel((x, y)) for y in range(10, 110)]
    assert sum(1 for c in column if c == (214, 39, 40)) > 90  # the red step line through the first panel
    blue = sum(1 for y in range(h) for xx in range(0, w, 4) if img.getpixel((xx, y)) == (31, 119, 180))
    green = sum(1 for y in range(h) for xx in range(0, w, 4) if img.getpixel((xx, y)) == (44, 160, 44))
    assert blue > 50 and green > 50


def test_a_zip_of_a_run_is_diagnosed_and_the_users_zip_kept(tmp_path: Path) -> None:
    z = _zip(FIXTURES / "wandb-verl-length-cap", tmp_path / "run.zip")
    before = z.read_bytes()
    assert run_kind(z) == "zip"
    d = diagnose_runs([z])
    assert d.root_finding.id == "length-cap" and d.root_finding.evidence["step"] == 70
    assert d.root_finding.file.startswith(f"{z}:/wandb-verl-length-cap/wandb/offline-run-")
    assert z.read_bytes() == before
    bad = tmp_path / "evil.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../../escape/run-x.wandb", b":W&B")
        zf.writestr("/abs/events.out.tfevents.1", b"")
    import pytest

    from rlmedic.errors import UserError

    with pytest.raises(UserError):
        diagnose_runs([bad])
    assert not (tmp_path.parent / "escape").exists()


def test_slack_thread_gets_the_chart_of_a_zipped_run(tmp_path: Path) -> None:
    from fake_slack import FakeSlack
    from test_slack import dispatch, final_updates, make_app, blocks_text

    slack = FakeSlack().start()
    try:
        app, bot = make_app(slack)
        z = _zip(FIXTURES / "wandb-verl-length-cap", tmp_path / "run.zip")
        files = [slack.serve_file("run.zip", z.read_bytes())]
        dm = {"type": "message", "user": "U0002", "text": "why did the reward fall?", "channel": "D0001",
              "ts": "1700000009.000100", "channel_type": "im", "files": files}
        assert dispatch(app, dm) == 200
        slack.wait_for(lambda f: f.of("files.completeUploadExternal"), timeout=60)
        text = blocks_text(final_updates(slack)[-1])
        assert "length" in text and "step 70" in text
        png = next(u for u in slack.uploads if u.startswith(b"\x89PNG"))
        img = Image.open(io.BytesIO(png))
        assert img.size[0] == 640
        done = slack.of("files.completeUploadExternal")[-1].args
        assert "step 70" in str(done.get("files")) and done["thread_ts"] == "1700000009.000100"
    finally:
        slack.stop()


def test_web_panel_image_for_a_run_answer(tmp_path: Path) -> None:
    from rlmedic.agent.events import Answer
    from rlmedic.ui.web import curve_png

    d = diagnose_runs([FIXTURES / "wandb-verl-length-cap"])
    answer = Answer(answer="", findings=[f.to_dict() for f in d.findings])
    path, caption = curve_png(tmp_path, answer)
    assert Image.open(path).size[0] == 640
    assert "response_length/clip_ratio (blue)" in caption and "step 70" in caption
    assert curve_png(tmp_path, Answer(answer="")) is None


def test_the_redacting_client_uploads_chart_pixels_untouched_but_not_text_chunks() -> None:
    from rlmedic.ui.slack_client import _redact_upload

    png = png_chart({"a": [[0, 1.0], [1, 2.0]]}, 1)
    assert _redact_upload(png) == png
    with_text = png[:33] + b"\x00\x00\x00\x05tEXtk\x00abc" + b"\x00\x00\x00\x00" + png[33:]
    assert _redact_upload(with_text) != with_text


from test_web import _ask, _client, web  # noqa: E402,F401 - the module's live web server (a fixture)


def test_web_app_plots_the_curves_of_an_uploaded_run_zip(web, tmp_path: Path) -> None:
    url, _sessions = web
    z = _zip(FIXTURES / "wandb-verl-length-cap", tmp_path / "run.zip")
    box, history, diag, *_rest, curve = _ask(_client(url), "why did the reward fall?", [z])
    assert "length cap" in diag and "step 70" in diag
    path = curve.get("value") if isinstance(curve, dict) else curve
    path = path.get("path") if isinstance(path, dict) else path
    img = Image.open(path)
    assert img.size[0] == 640 and img.format == "PNG"
