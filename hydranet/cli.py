"""`hydranet <command>`: parses arguments and calls into the packages, nothing more."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from hydranet.config import ConfigError, load_config
from hydranet.rig import RigError

# errors a user can act on: printed as one line, exit status 2
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, RigError, FileExistsError, FileNotFoundError,
                                                PermissionError, ValueError, RuntimeError, OSError)


def _sim_config(args):
    from sim.config import SimConfig

    overrides = list(args.set)
    if getattr(args, "rig", None):
        overrides.append(f"rig={args.rig}")
    return load_config(SimConfig, args.config, overrides)


def cmd_sim_generate(args) -> None:
    from sim.generate import generate_dataset

    out = generate_dataset(args.out, _sim_config(args), args.scenes, args.seed, progress=not args.quiet)
    print(f"wrote {out}")


def cmd_sim_preview(args) -> None:
    from hydranet.data import SimDataset
    from hydranet.viz import sample_preview, write_png
    from sim.generate import generate_dataset

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            cfg = _sim_config(args)
            data = generate_dataset(Path(tmp) / "preview", cfg, 1, args.seed, progress=False)
        ds = SimDataset(data)
        if not 0 <= args.frame < len(ds):
            raise ValueError(f"--frame {args.frame} is outside the dataset's {len(ds)} frames")
        write_png(args.out, sample_preview(ds[args.frame], ds.meta))
    print(f"wrote {args.out}")


def cmd_sim_export_nuscenes(args) -> None:
    from sim.nuscenes_export import export_nuscenes_from_sim

    out = export_nuscenes_from_sim(args.out, _sim_config(args), args.scenes, args.seed)
    print(f"wrote {out}")


def cmd_demo(args) -> None:
    from hydranet.demo import run_demo

    run_demo(Path(args.out))


def _add_sim_args(p: argparse.ArgumentParser, scenes: bool = True) -> None:
    p.add_argument("--config", type=Path, default=None, help="sim config YAML (configs/sim.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--rig", default=None, help="rig preset name (nuscenes6, tesla8) or calibration YAML file")
    p.add_argument("--seed", type=int, default=0)
    if scenes:
        p.add_argument("--scenes", type=int, default=4)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hydranet", description="HydraNet perception stack")
    sub = ap.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="the built-in driving simulator").add_subparsers(dest="sim_command", required=True)

    g = sim.add_parser("generate", help="render a dataset (docs/dataset_format.md)")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_sim_args(g)
    g.set_defaults(func=cmd_sim_generate)

    p = sim.add_parser("preview", help="PNG mosaic of all cameras with labels, plus the BEV")
    p.add_argument("--out", type=Path, default=Path("preview.png"))
    p.add_argument("--data", type=Path, default=None, help="a generated dataset (default: render one scene now)")
    p.add_argument("--frame", type=int, default=0)
    _add_sim_args(p, scenes=False)
    p.set_defaults(func=cmd_sim_preview)

    e = sim.add_parser("export-nuscenes", help="write the sim in the nuScenes v1.0 table format")
    e.add_argument("--out", type=Path, required=True)
    _add_sim_args(e)
    e.set_defaults(func=cmd_sim_export_nuscenes)

    d = sub.add_parser("demo", help="the main job on the built-in sim (what `make demo` runs)")
    d.add_argument("--out", type=Path, default=Path("out/demo"))
    d.set_defaults(func=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
