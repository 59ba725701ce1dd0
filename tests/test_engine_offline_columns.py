"""`hydranet engine uncertainty` (issue 25.3 on the catalog): an ensemble of exported models and the production
model's flip TTA over a shadow run, run with the torch-free runtime on any fleet, stored as offline columns, and
mined by `--strategy ensemble | tta`. References: the eager PyTorch path (`offline_signals` on the checkpoints)
and the catalog's own rows."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from engine_fixtures import make_fleet, make_model

from data_engine.catalog import Catalog
from data_engine.catalog_schema import CatalogError
from data_engine.mining import mine
from data_engine.shadow import run_shadow
from data_engine.uncertainty import offline_signals, pool_signals, run_uncertainty
from hydranet.cli import main


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline")
    fleet = make_fleet(root / "fleet", clips=2, frames=2)
    models = [make_model(root, fleet, f"m{k}.onnx", seed=k) for k in range(2)]
    run_shadow(models[0], fleet, root / "cat.db", workers=1, progress=False)
    return root, fleet, models


def test_the_runtime_columns_equal_the_eager_ones(env):
    """The same columns from ONNX Runtime on the exports as from eager PyTorch on their checkpoints."""
    root, fleet, models = env
    eager = offline_signals([root / f"run_m{k}" for k in range(2)], fleet)
    ours = pool_signals(models, fleet, [(str(c), str(d)) for c, d in eager["frame_ids"]])
    assert set(ours) == set(eager["signals"])
    for col, ref in eager["signals"].items():
        assert np.isfinite(ours[col]).all(), col
        if col in ("ensemble", "tta"):  # pool ranks: ties may break either way under float noise
            assert np.corrcoef(ours[col], ref)[0, 1] > 0.9, col
        else:
            np.testing.assert_allclose(ours[col], ref, rtol=1e-4, atol=1e-7, err_msg=col)
    assert (ours["ens_drivable"] > 0).all() and (ours["tta_depth"] > 0).all()


def test_stored_in_the_catalog_and_mined(env, tmp_path, capsys):
    root, fleet, models = env
    cat = tmp_path / "cat.db"
    cat.write_bytes((root / "cat.db").read_bytes())
    assert main(["engine", "uncertainty", "--catalog", str(cat), "--models", *map(str, models), "--quiet"]) == 0
    assert "2 models over 4 frames" in capsys.readouterr().out
    with Catalog(cat) as c:
        run = c.latest_run()
        cols = c.offline(run)
        sources = c.offline_sources(run)
        ok = [int(f) for f in c.table(run)["frame_id"]]
    assert sorted(cols["ensemble"]) == ok and all(np.isfinite(v) for col in cols.values() for v in col.values())
    assert [m["path"] for m in sources["ensemble"]] == [str(m.resolve()) for m in models]
    # the strategy: the frames highest on the stored column, best first
    for strategy in ("ensemble", "tta"):
        sel = mine(cat, 2, strategy, name=f"s-{strategy}")
        want = sorted(cols[strategy], key=lambda f: (-cols[strategy][f], f))[:2]
        assert [it["frame_id"] for it in sel["items"]] == want
        assert sel["items"][0]["reason"]["strategy"] == strategy
        assert sel["items"][0]["reason"]["score"] == pytest.approx(cols[strategy][want[0]], abs=1e-6)
    # clips: each clip scores its highest frame
    sel = mine(cat, 1, "ensemble", unit="clip", name="clip-ens")
    best = max(cols["ensemble"], key=lambda f: cols["ensemble"][f])
    assert best in sel["items"][0]["frame_ids"]
    # deterministic: an overwrite gives the same values
    again = run_uncertainty(cat, models, overwrite=True)
    with Catalog(cat) as c:
        assert c.offline(run) == cols and again["frames"] == 4


def test_write_offline_refuses_and_replaces_whole(tmp_path):
    with Catalog(tmp_path / "c.db", create=True) as cat:
        cat.db.execute("INSERT INTO fleets (id, root) VALUES (1, '/f')")
        cat.db.execute("INSERT INTO clips (id, fleet_id, name) VALUES (1, 1, 'c')")
        cat.db.execute("INSERT INTO frames (id, clip_id, idx, dir) VALUES (1, 1, 0, '000000'), (2, 1, 1, '000001')")
        cat.write_offline(7, [1, 2], {"ensemble": np.array([0.5, np.nan])}, [{"path": "a"}])
        assert cat.offline(7)["ensemble"][1] == 0.5 and np.isnan(cat.offline(7)["ensemble"][2])  # NaN stored as NULL
        assert cat.db.execute("SELECT value FROM offline_signals WHERE frame_id = 2").fetchone()[0] is None
        with pytest.raises(CatalogError, match=r"holds offline column\(s\) \['ensemble'\] already; pass --overwrite"):
            cat.write_offline(7, [1], {"ensemble": np.array([0.9]), "tta": np.array([0.1])}, [{"path": "b"}])
        assert cat.offline(7) == {"ensemble": cat.offline(7)["ensemble"]}  # the refused write left nothing
        cat.write_offline(7, [2], {"ensemble": np.array([0.9])}, [{"path": "b"}], overwrite=True)
        assert cat.offline(7) == {"ensemble": {2: 0.9}} and cat.offline_sources(7) == {"ensemble": [{"path": "b"}]}
        assert cat.offline(8) == {}


def test_a_version_3_catalog_gains_the_tables_keeping_its_rows(env, tmp_path):
    root, _, _ = env
    old = tmp_path / "old.db"
    old.write_bytes((root / "cat.db").read_bytes())
    db = sqlite3.connect(str(old))
    db.execute("DROP TABLE offline_signals")
    db.execute("DROP TABLE offline_sources")
    db.execute("PRAGMA user_version = 3")
    n = db.execute("SELECT count(*) FROM signals").fetchone()[0]
    db.commit()
    db.close()
    with Catalog(old) as cat:
        assert cat.columns("offline_signals") and cat.db.execute("SELECT count(*) FROM signals").fetchone()[0] == n
        assert cat.db.execute("PRAGMA user_version").fetchone()[0] == 4
