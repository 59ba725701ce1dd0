"""One meaning per flag across every command (docs/guide.md "Flags"): `--checkpoint` a run folder or
checkpoint.pt, `--onnx` an exported model, `--data` a dataset or fleet folder, `--candidate` a candidate
checkpoint, `--version` a nuScenes version folder. A flag renamed to follow this keeps its old spelling for
one release: `renamed(parser, "--onnx", "--model", ...)` accepts both and prints one line naming the new flag
when the old one is used.
"""
from __future__ import annotations

import argparse
import importlib
import sys


class _RenamedStore(argparse._StoreAction):
    """Store the value; warn (stderr, one line) when the option came under a deprecated spelling."""

    def __init__(self, *args, deprecated: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.deprecated = deprecated

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in self.deprecated:
            print(f"warning: {parser.prog} {option_string} is deprecated and goes in the next release; use "
                  f"{self.option_strings[0]}", file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


def renamed(parser: argparse.ArgumentParser, new: str, *old: str, **kwargs) -> argparse.Action:
    """`parser.add_argument(new, ...)` that also accepts the `old` spellings, with a deprecation warning; the
    help shows the new flag only (the old spellings are listed as deprecated at its end)."""
    kwargs["help"] = f"{kwargs.get('help', '')} (was {', '.join(old)}: deprecated)".strip()
    return parser.add_argument(new, *old, action=_RenamedStore, deprecated=tuple(old), **kwargs)


class Registered:
    """argparse `choices` read from a registry when a value is checked or the help printed (the one place a name is
    spelled), so the CLI starts without importing it: `Registered("hydranet.data.formats:format_names", "auto")`
    (a function giving the names, or a mapping whose keys are the names), with `extra` names first."""

    def __init__(self, registry: str, *extra: str):
        self.registry, self.extra = registry, extra

    def names(self) -> list[str]:
        module, attr = self.registry.split(":")
        found = getattr(importlib.import_module(module), attr)
        return [*self.extra, *(found() if callable(found) else found)]

    def __contains__(self, value: object) -> bool:
        return value in self.names()

    def __iter__(self):
        return iter(self.names())


def engine_config(args: argparse.Namespace):
    """The data engine's config of a command with `--config` and `--set` (data_engine.config.EngineConfig)."""
    from data_engine.config import EngineConfig
    from hydranet.config import load_config

    return load_config(EngineConfig, args.config, list(args.set))
