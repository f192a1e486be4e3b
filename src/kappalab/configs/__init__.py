"""The shipped experiment configs (JSON files in this package) and the one way to read and override them.

* :func:`read` - a config file as a dict: a name of a shipped file (``"table1_paper_ours"``) or a path.
* :func:`parse_set` - the command line's ``--set KEY=VALUE`` items as ``{dotted key: value}``.
* :func:`read_overrides` - ``--config FILE`` (a JSON object of overrides) and ``--set`` items as one flat dict.
* :func:`set_dotted` - write one dotted key into a nested dict, refusing keys the schema does not know.
* :func:`conforms` / :func:`described` - a value against a schema field's declared type, and that type in words.

Which keys a file may hold is declared by its schema (:class:`kappalab.immunization.MethodConfig` for Tables 1
and 2, :class:`kappalab.reproduce.table3.config.Table3Config` for Table 3); an unknown or misspelt key is a
:class:`ConfigError` naming the key and the file.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Any, Iterable, Literal, Mapping, get_args, get_origin

#: The folder of the shipped configs (inside the installed package).
CONFIG_DIR = Path(str(resources.files(__name__)))

#: The two protocols every table runs under: ``"paper"`` (the paper's text) and ``"official"`` (the authors' public
#: code), here once (a module without torch, so that the command lines and Table 3's config loader need none).
PROTOCOLS: tuple[str, ...] = ("paper", "official")


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the key and the file (or ``--set``)."""


def conforms(value: Any, declared: Any) -> bool:
    """``value`` is of the declared type (bool is not a number here; an int is a float; a tuple may be a list; a
    ``list[T]`` / ``dict[str, T]`` holds values of T)."""
    origin, args = get_origin(declared), get_args(declared)
    if origin is UnionType:
        return any(conforms(value, a) for a in args)
    if origin is Literal:
        return isinstance(value, str) and value in args
    if origin is tuple:
        return isinstance(value, (tuple, list)) and len(value) == len(args) and \
            all(conforms(v, a) for v, a in zip(value, args))
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(k, args[0]) and conforms(v, args[1])
                                               for k, v in value.items())
    if declared is Any:
        return True
    if declared is type(None):
        return value is None
    if declared is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if declared is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, declared)


def described(declared: Any) -> str:
    """The declared type in words, for an error message."""
    origin, args = get_origin(declared), get_args(declared)
    if origin is UnionType:
        return " or ".join(described(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return f"a list of {len(args)} numbers"
    if origin is list:
        return f"a list of {described(args[0]).split(' ', 1)[1]}s"
    if origin is dict:
        return f"an object of {described(args[1]).split(' ', 1)[1]}s"
    if declared is type(None):
        return "null"
    return ("an " if declared.__name__[0] in "aeiou" else "a ") + declared.__name__


def path_of(name_or_path: str | Path) -> Path:
    """A config's file: an existing ``.json`` path as given, else the shipped ``CONFIG_DIR/<name>.json``."""
    path = Path(name_or_path)
    if path.suffix == ".json" and path.is_file():
        return path
    shipped = CONFIG_DIR / (path.name if path.suffix == ".json" else f"{path.name}.json")
    if shipped.is_file():
        return shipped
    raise ConfigError(f"config {str(name_or_path)!r}: no such file (neither {path} nor a shipped config; shipped: "
                      f"{', '.join(names())})")


def names() -> list[str]:
    """The names of the shipped configs."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def read(name_or_path: str | Path) -> tuple[dict[str, Any], Path]:
    """A config file's JSON object and its path."""
    path = path_of(name_or_path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"config {path}: not valid JSON ({error})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path}: must hold a JSON object, got {type(raw).__name__}")
    return raw, path


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON when it parses (numbers, true/false/null, lists, objects), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_set(items: Iterable[str] | None) -> dict[str, Any]:
    """``["lambda_H=3e7", "extra.shift=1e-5"]`` -> ``{"lambda_H": 3e7, "extra.shift": 1e-5}``."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a (dotted) key, e.g. lambda_H=3e7")
        if key in out:
            raise ConfigError(f"--set: key {key!r} given twice")
        out[key] = parse_value(value)
    return out


def set_dotted(target: dict[str, Any], key: str, value: Any, known: Mapping[str, Any], where: str) -> None:
    """``target[a][b] = value`` for ``key = "a.b"``; every level must be a key of ``known`` (the schema's nested
    dict of allowed keys, ``None`` at a leaf that takes any value)."""
    parts = key.split(".")
    node, schema = target, known
    for depth, part in enumerate(parts):
        if not isinstance(schema, Mapping) or part not in schema:
            allowed = ", ".join(sorted(schema)) if isinstance(schema, Mapping) else "(none: a leaf value)"
            raise ConfigError(f"{where}: unknown key {'.'.join(parts[:depth + 1])!r} (allowed here: {allowed})")
        if depth == len(parts) - 1:
            node[part] = value
        else:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node, schema = node[part], schema[part]


def read_overrides(config_file: str | None, items: Iterable[str] | None) -> dict[str, Any]:
    """``--config FILE`` (a JSON object of overrides, nested or dotted keys; an ``extra`` entry may be written
    ``{"value": ..., "reason": ...}``) then the ``--set`` items (which win), as one flat ``{dotted key: value}``."""
    out: dict[str, Any] = {}
    if config_file is not None:
        try:
            raw = json.loads(Path(config_file).read_text())
        except OSError as error:
            raise ConfigError(f"--config {config_file}: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise ConfigError(f"--config {config_file}: not valid JSON ({error})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"--config {config_file}: must hold a JSON object of overrides")

        def flatten(node: Mapping[str, Any], prefix: str) -> None:
            for key, value in node.items():
                if isinstance(value, dict) and set(value) != {"value", "reason"}:
                    flatten(value, f"{prefix}{key}.")
                else:
                    out[f"{prefix}{key}"] = value["value"] if isinstance(value, dict) else value

        flatten({k: v for k, v in raw.items() if k != "_comment"}, "")
    out.update(parse_set(items))
    return out
