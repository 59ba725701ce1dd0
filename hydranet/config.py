"""The config loader every schema uses (it holds no schema itself): YAML files mapped onto frozen
dataclasses. The schemas: hydranet/experiment.py (training), sim/config.py (the simulator),
data_engine/config.py (the engine loop).

`load_config(Schema, path, overrides)` reads YAML, applies `a.b=value` overrides and builds the
dataclass tree. An unknown key or a value of the wrong type raises `ConfigError` naming the
dotted key and what is allowed; nothing is silently ignored or coerced.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

T = TypeVar("T")
# The shipped configs (a link to the repo's configs/; package data in a wheel): `--config tiny`
SHIPPED_CONFIGS = Path(__file__).parent / "configs"


class ConfigError(ValueError):
    """A config key is unknown, missing or has the wrong type."""


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names the same key twice (PyYAML keeps the last one without a word)."""

    def __init__(self, key, first_line: int, mark):
        super().__init__(None, None, f"duplicate key {key!r} (first on line {first_line})", mark)
        self.key, self.first_line = key, first_line


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads `1e-4` and `5.0e1` as floats: YAML 1.1's float rule needs a dot and
    a signed exponent (`1.0e-4`), so plain PyYAML gives the string '1e-4' and a learning rate is refused.
    A key written twice in one mapping (`lr: 0.1` ... `lr: 0.001`) is an error, not the last one silently
    kept; a merge (`<<: *base`) may still be overridden by an explicit key."""

    def flatten_mapping(self, node):
        # called on every mapping before its merges are folded in (and again later, on a merge source,
        # when that node itself is constructed: checked once, on first sight, while it holds only its own keys)
        checked = self.__dict__.setdefault("_dup_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise DuplicateKeyError(key, seen[key], key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        super().flatten_mapping(node)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",  # 1e-4, 5.0e1, .5e3 (YAML 1.1 also wants the exponent's sign)
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def yaml_load(text: str, where: str, error: type[Exception] = ConfigError):
    """YAML text -> Python values (safe: plain data only); a syntax error or a key written twice in one
    mapping raises one `error` line naming `where`, the line (and the key)."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except DuplicateKeyError as e:
        raise error(f"{where}: key {e.key!r} appears twice (line {e.first_line} and line {e.problem_mark.line + 1}); "
                    "keep one of them") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"{where} is not valid YAML{at}: {problem}; fix the syntax") from None


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _check_finite(value: Any, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key '{key}': expected a finite number, got {value!r}; give a number")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{key}[{i}]")


YAML_WORDS = {True: ("on", "yes", "true"), False: ("off", "no", "false")}  # what YAML 1.1 reads as a boolean


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against annotation `tp`; returns the value (tuples for sequences)."""
    origin = get_origin(tp)
    if tp is Any:  # free-form (a task's options): still no NaN or infinity anywhere inside
        _check_finite(value, key)
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"config key '{key}': {value!r} is not {' or '.join(_type_name(a) for a in args)}")
    if origin is Literal:
        options = get_args(tp)
        if isinstance(value, bool) and value not in options:  # YAML 1.1 reads on/off, yes/no as booleans
            value = next((w for w in (YAML_WORDS[value]) if w in options), value)
        if value not in options:
            raise ConfigError(f"config key '{key}': {value!r} is not allowed; choose one of {list(options)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"config key '{key}': expected {len(args)} values, got {len(value)}")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        kt, vt = get_args(tp)
        return {_convert(k, kt, key): _convert(v, vt, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an int past 1.8e308
            number = math.inf
        if not math.isfinite(number):  # .nan / .inf: no setting means it, and JSON cannot hold it (config.json)
            raise ConfigError(f"config key '{key}': expected a finite number, got {value!r}; give a number")
        return number
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}': expected a string, got {value!r}")
        return value
    raise ConfigError(f"config key '{key}': unsupported annotation {tp!r}")


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, validating every key and type."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{prefix or '<root>'}': expected a mapping, got {data!r}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"'{prefix}.{unknown[0]}'" if prefix else f"'{unknown[0]}'"
        raise ConfigError(f"unknown config key {where}; allowed keys here: {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"config key '{key}' is required")
    return cls(**kwargs)


def to_dict(obj: Any) -> Any:
    """Dataclass tree to plain YAML/JSON-able values (tuples become lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def with_defaults(stored: Any, defaults: Any) -> Any:
    """`stored` (a config dict read back from a file) with every key it lacks taken from `defaults`, nested."""
    if not isinstance(stored, dict) or not isinstance(defaults, dict):
        return stored
    return {**defaults, **{k: with_defaults(v, defaults.get(k)) for k, v in stored.items()}}


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Apply `a.b.c=value` strings (values parsed as YAML) onto a nested dict, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.sub=value")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override '{item}': '{p}' is not a section")
            node = child
        if not all(parts):
            raise ConfigError(f"override '{item}': empty key part; write key.sub=value")
        node[parts[-1]] = yaml_load(raw, f"override '{item}': the value")
    return data


def add_override_option(parser, help: str = "override a config key") -> None:
    """A command's repeatable `--set KEY=VALUE` (argparse), read by `apply_overrides`."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def shipped_config_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))


def resolve_config_path(path: str | Path) -> Path:
    """A YAML file, or the name of a shipped config (`tiny`: SHIPPED_CONFIGS/tiny.yaml) when no
    file of that name exists; a bare name that is neither raises, listing the shipped ones."""
    path = Path(path)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    shipped = SHIPPED_CONFIGS / f"{path}.yaml"
    if not shipped.is_file():
        raise ConfigError(f"config '{path}' is neither a file nor a shipped config; shipped configs: "
                          f"{shipped_config_names()} (or give a YAML file)")
    return shipped


def load_config(cls: type[T], path: str | Path | None = None, overrides: tuple[str, ...] | list[str] = ()) -> T:
    """Read YAML at `path` (a file or a shipped config's name; None: start empty), apply
    overrides, build `cls`."""
    data: dict = {}
    if path is not None:
        path = resolve_config_path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path} is a folder; give a YAML file") from None
        except PermissionError:
            raise ConfigError(f"config file {path} cannot be read: permission denied; check its permissions") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not a text file; give a YAML file") from None
        data = yaml_load(text, f"config file {path}")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
    apply_overrides(data, list(overrides))
    return from_dict(cls, data)
