"""The torch-free checks `hydranet engine promote` runs (issue 34 item 7: promote took 27-35 s, nearly all of it
importing torch, torchvision and onnx): `hydranet.checkpoint_scan.checkpoint_sound` says yes only where
`load_checkpoint` accepts the file with finite weights (else torch decides), and `deploy.metadata.file_metadata`
reads the same metadata as `read_metadata` without onnx. Neither may run code from a foreign pickle."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hydranet.checkpoint import load_checkpoint
from hydranet.checkpoint_scan import checkpoint_sound

REPO = Path(__file__).resolve().parents[1]


def _ckpt(**model) -> dict:
    base = {"conv.weight": torch.randn(4, 3, 3, 3), "conv.bias": torch.zeros(4), "bn.num_batches_tracked": torch.tensor(3)}
    return {"model": {**base, **model}, "config": "{}", "meta": "{}", "step": 2, "optimizer": {"state": {}}}


def _save(tmp: Path, name: str, obj, **kw) -> Path:
    torch.save(obj, tmp / name, **kw)
    return tmp / name


def _torch_accepts(path: Path) -> bool:
    try:
        load_checkpoint(path)
    except (ValueError, OSError):
        return False
    return True


def test_sound_only_where_torch_accepts(tmp_path):
    nan = torch.zeros(100)
    nan[90] = float("nan")
    permuted = torch.randn(3, 4, 3, 3).permute(1, 0, 2, 3)
    permuted[-1, -1, -1, -1] = float("inf")
    bf16_inf = torch.randn(8).bfloat16()
    bf16_inf[5] = float("inf")
    files = {
        "good": (_save(tmp_path, "good.pt", _ckpt()), True),
        "fp16": (_save(tmp_path, "fp16.pt", _ckpt(extra=torch.randn(5).half())), True),
        "bf16": (_save(tmp_path, "bf16.pt", _ckpt(extra=torch.randn(5).bfloat16())), True),
        "view-of-a-storage-with-nan-outside-it": (_save(tmp_path, "view.pt", _ckpt(extra=nan[:50])), True),
        "nan": (_save(tmp_path, "nan.pt", _ckpt(extra=nan[80:95])), False),
        "permuted-inf": (_save(tmp_path, "perm.pt", _ckpt(extra=permuted)), False),
        "bf16-inf": (_save(tmp_path, "bf16inf.pt", _ckpt(extra=bf16_inf)), False),
        "no-step": (_save(tmp_path, "nostep.pt", {k: v for k, v in _ckpt().items() if k != "step"}), False),
        "not-a-dict": (_save(tmp_path, "list.pt", [1, 2]), False),
    }
    good = (tmp_path / "good.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(good[: len(good) // 2])
    (tmp_path / "junk.pt").write_bytes(b"garbage " * 64)
    files["truncated"] = (tmp_path / "trunc.pt", False)
    files["junk"] = (tmp_path / "junk.pt", False)
    files["legacy-format"] = (_save(tmp_path, "legacy.pt", _ckpt(), _use_new_zipfile_serialization=False), False)
    for name, (path, sound) in files.items():
        assert checkpoint_sound(path) is sound, name
        if sound:  # a yes here is a yes of torch's
            assert _torch_accepts(path), name


class _Evil:
    def __reduce__(self):
        return (exec, ("open(__import__('os').environ['PWNED'], 'w').write('x')",))


def test_a_foreign_pickle_runs_no_code(tmp_path, monkeypatch):
    path = _save(tmp_path, "evil.pt", {**_ckpt(), "extra": _Evil()})
    monkeypatch.setenv("PWNED", str(tmp_path / "pwned"))
    assert checkpoint_sound(path) is False
    assert not (tmp_path / "pwned").exists()


def test_promote_reads_metadata_without_onnx_and_equals_read_metadata(tmp_path):
    """A real export: file_metadata == read_metadata; a truncated file gets read_metadata's refusal; and promote
    over the whole path (checkpoint and export) imports neither torch nor onnx."""
    from hydranet.cli import main

    data = tmp_path / "sim"
    assert main(["sim", "generate", "--out", str(data), "--scenes", "1", "--seed", "0", "--quiet", "--set",
                 "frames_per_scene=1", "--set", "image_width=64", "--set", "image_height=48"]) == 0
    run = tmp_path / "run"
    assert main(["train", "--config", "tiny", "--out", str(run), "--set", f"data.root={data}", "--set",
                 "data.cameras=[CAM_FRONT]", "--set", "data.image_size=[64,64]", "--set", "steps=1", "--set",
                 "batch_size=1", "--set", "device=cpu", "--quiet"]) == 0
    assert main(["export", "--checkpoint", str(run), "--out", str(run / "model.onnx")]) == 0
    from deploy.metadata import file_metadata, read_metadata

    assert file_metadata(run / "model.onnx") == read_metadata(run / "model.onnx")
    (tmp_path / "cut.onnx").write_bytes((run / "model.onnx").read_bytes()[:5000])
    with pytest.raises(Exception) as slow:
        read_metadata(tmp_path / "cut.onnx")
    with pytest.raises(type(slow.value)):
        file_metadata(tmp_path / "cut.onnx")
    code = ("import sys\nfrom hydranet.cli import main\nrc = main(sys.argv[1:])\n"
            "print('imported', sorted(m for m in ('torch', 'onnx', 'torchvision') if m in sys.modules))\nsys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, "engine", "promote", "--catalog", str(tmp_path / "c.db"),
                        "--checkpoint", str(run), "--onnx", str(run / "model.onnx")], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "production:" in p.stdout and "imported []" in p.stdout
