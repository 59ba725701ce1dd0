"""A machine without a usable GL driver gets one actionable line, from the API and the CLI."""
import moderngl
import pytest

from hydranet.cli import main
from sim.render import RenderError, create_context


def _no_driver(*args, **kwargs):
    raise Exception("eglInitialize failed\nmore driver noise")


def test_missing_gl_driver_is_one_line(monkeypatch):
    monkeypatch.setattr(moderngl, "create_standalone_context", _no_driver)
    with pytest.raises(RenderError) as e:
        create_context()
    msg = str(e.value)
    assert "\n" not in msg and "eglInitialize failed" in msg and "apt-get install" in msg


def test_cli_reports_missing_driver_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(moderngl, "create_standalone_context", _no_driver)
    out = tmp_path / "ds"
    assert main(["sim", "generate", "--out", str(out), "--scenes", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no usable OpenGL") and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_keeps_the_traceback_of_a_foreign_runtime_error(monkeypatch, tmp_path):
    """Only the project's own RuntimeErrors become one line; anything else is a bug and re-raises."""
    import sim.generate

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch deep inside a library")

    monkeypatch.setattr(sim.generate, "generate_dataset", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        main(["sim", "generate", "--out", str(tmp_path / "ds"), "--scenes", "1", "--quiet"])
