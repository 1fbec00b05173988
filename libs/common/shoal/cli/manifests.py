"""Reading manifest files for `shoal simulate`: YAML (multi-document) or JSON, files or directories.

Every document keeps its origin (`file:document-number`, numbers count from 1) so problems can be
reported as `file:N: field: problem`. `kind: List` documents (kubectl output) are unpacked; their
items keep the list's origin and report fields as `items[i].field`.

KAI snapshots are read too: the zip that KAI's `/get-snapshot` serves (any file name; it holds
`snapshot.json`) or that JSON itself. Its `rawObjects` lists (pods, nodes, queues, podGroups,
bindRequests, priorityClasses, topologies) become documents with their `kind` filled in, and the
KAI scheduler config's `actions` list (plus `gpuspread` among its plugins) becomes a SchedulerConfig.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass

import yaml

SUFFIXES = (".yaml", ".yml", ".json", ".zip", ".gzip")


class ManifestError(Exception):
    """Input that cannot be read at all (missing file, invalid YAML/JSON)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines

    def one_line(self) -> str:
        """Every problem on one printable line (as a CLI error reports it)."""
        return "; ".join(one_line(line) for line in self.lines)


def one_line(text: str) -> str:
    """A problem line as one printable line: a character the input named it by that is not printable (a key
    "\r" would end the line there) is written as its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


RAW_KINDS = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "queues": ("scheduling.run.ai/v2", "Queue"),
    "podGroups": ("scheduling.run.ai/v2alpha2", "PodGroup"),
    "bindRequests": ("scheduling.run.ai/v1alpha2", "BindRequest"),
    "priorityClasses": ("scheduling.k8s.io/v1", "PriorityClass"),
    "topologies": ("kai.scheduler/v1alpha1", "Topology"),
}


@dataclass(frozen=True)
class Origin:
    path: str
    document: int  # 1-based
    item: int | None = None  # index inside a `kind: List`
    container: str = "items"  # the list the item sits in (`rawObjects.pods` for KAI snapshots)

    def where(self, field: str) -> str:
        prefix = f"{self.container}[{self.item}]" if self.item is not None else ""
        field = f"{prefix}.{field}" if prefix and field else (prefix or field or "document")
        return f"{self.path}:{self.document}: {field}"


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files in the given order; a directory contributes its manifest files in sorted walk order."""
    files: list[str] = []
    missing: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(SUFFIXES))
        elif os.path.isfile(path):
            files.append(path)
        else:
            missing.append(f"{path}:0: -f: no such file or directory")
    if missing:
        raise ManifestError(missing)
    return files


def _read_text(path: str) -> tuple[str, bool]:
    """The file's text, and whether it is JSON for sure (a .json file or a KAI snapshot zip)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    if raw.startswith(b"PK\x03\x04"):  # a KAI snapshot zip
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            names = [n for n in archive.namelist() if n.endswith(".json")]
            if not names:
                raise OSError(f"{path}: zip holds no JSON file")
            name = "snapshot.json" if "snapshot.json" in names else sorted(names)[0]
            return archive.read(name).decode("utf-8"), True
    return raw.decode("utf-8"), path.endswith(".json")


MAX_DEPTH = 100  # nesting levels a document may have; Kubernetes objects need about 20


class TooDeep(ValueError):
    """A document nested more deeply than MAX_DEPTH (or than the parser's own recursion allows)."""


def _documents(text: str, is_json: bool) -> list[object]:
    try:
        if is_json:
            data = json.loads(text)
            docs = list(data) if isinstance(data, list) else [data]
        else:
            docs = list(yaml.safe_load_all(text))
    except RecursionError:
        raise TooDeep(f"nested more than {MAX_DEPTH} levels deep") from None
    for doc in docs:
        if _depth(doc) > MAX_DEPTH:
            raise TooDeep(f"nested more than {MAX_DEPTH} levels deep")
    if _SURROGATE_ESCAPE.search(text):
        docs = [_join_surrogates(doc) for doc in docs]
    return docs


# "\ud83d\ude00" escapes: JSON's (and YAML's) way to write a character beyond U+FFFF as a UTF-16 pair
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class BadCharacter(ValueError):
    """A string holding half of a UTF-16 surrogate pair: no character at all."""


def _text(value: str) -> str:
    try:
        return value.encode("utf-16", "surrogatepass").decode("utf-16")  # joins the pairs PyYAML leaves split
    except UnicodeDecodeError:
        raise BadCharacter(f"a string holds an unpaired UTF-16 surrogate escape ({value!r})") from None


def _join_surrogates(value: object) -> object:
    """The document with every escaped surrogate pair joined into its character; BadCharacter for a lone half."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {(_text(k) if isinstance(k, str) else k): _join_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_join_surrogates(v) for v in value]
    return value


def _depth(value: object) -> int:
    """The nesting depth of a parsed document, without recursion (YAML anchors may share nodes)."""
    deepest, stack, seen = 0, [(value, 1)], set()
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list) or id(item) in seen:
            continue
        seen.add(id(item))
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _kai_config(config: object) -> dict | None:
    """A SchedulerConfig from a KAI snapshot's scheduler config (actions, gpuspread plugin)."""
    if not isinstance(config, dict):
        return None
    spec: dict = {}
    actions = config.get("actions")
    if isinstance(actions, str) and actions.strip():
        spec["actions"] = [a.strip() for a in actions.split(",") if a.strip()]
    plugins = {p.get("name") for tier in config.get("tiers") or () if isinstance(tier, dict)
               for p in tier.get("plugins") or () if isinstance(p, dict)}
    if "gpuspread" in plugins:
        spec["placementStrategy"] = {"gpu": "spread"}
    return {"apiVersion": "shoal.io/v1alpha1", "kind": "SchedulerConfig", "spec": spec} if spec else None


def _kai_snapshot(path: str, number: int, snapshot: dict) -> tuple[list, list[Origin]]:
    documents: list = []
    origins: list[Origin] = []
    raw = snapshot.get("rawObjects") if isinstance(snapshot.get("rawObjects"), dict) else {}
    for key in sorted(raw):
        if key not in RAW_KINDS or not isinstance(raw[key], list):
            continue
        api_version, kind = RAW_KINDS[key]
        for i, item in enumerate(raw[key]):
            if isinstance(item, dict):
                item = {"apiVersion": api_version, "kind": kind, **{k: v for k, v in item.items() if v is not None}}
                item["apiVersion"] = item.get("apiVersion") or api_version
                item["kind"] = item.get("kind") or kind
            documents.append(item)
            origins.append(Origin(path, number, i, f"rawObjects.{key}"))
    config = _kai_config(snapshot.get("config"))
    if config is not None:
        documents.append(config)
        origins.append(Origin(path, number, None))
    return documents, origins


def load_documents(paths: Iterable[str]) -> tuple[list[dict], list[Origin]]:
    """All non-empty documents from `paths`, with their origins. Raises ManifestError."""
    documents: list[dict] = []
    origins: list[Origin] = []
    errors: list[str] = []
    for path in expand_paths(paths):
        try:
            text, is_json = _read_text(path)
            docs = _documents(text, is_json)
        except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
            errors.append(f"{path}:0: file: {getattr(exc, 'strerror', None) or exc}")
            continue
        except json.JSONDecodeError as exc:
            errors.append(f"{path}:1: document: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
            continue
        except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
            doc_no = text[: exc.position].count("\n---") + 1
            line = text[: exc.position].count("\n") + 1
            code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
            errors.append(f"{path}:{doc_no}: document: invalid YAML at line {line}: character #x{code:04x} "
                          "is not allowed")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            doc_no = text[: mark.index].count("\n---") + 1 if mark is not None else 1
            detail = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            line = f" at line {mark.line + 1}" if mark is not None else ""
            errors.append(f"{path}:{doc_no}: document: invalid YAML{line}: {detail}")
            continue
        except ValueError as exc:  # TooDeep, BadCharacter; an integer of more digits than Python converts (4,300)
            detail = str(exc) if isinstance(exc, TooDeep | BadCharacter) else \
                f"a number too long to read ({str(exc).split(';')[0]})"
            errors.append(f"{path}:1: document: {detail}")
            continue
        for number, doc in enumerate(docs, start=1):
            if doc is None:
                continue
            if isinstance(doc, dict) and "rawObjects" in doc and "kind" not in doc:
                more, where = _kai_snapshot(path, number, doc)
                documents.extend(more)
                origins.extend(where)
                continue
            if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                for i, item in enumerate(doc["items"]):
                    documents.append(item)
                    origins.append(Origin(path, number, i))
                continue
            documents.append(doc)
            origins.append(Origin(path, number))
    if errors:
        raise ManifestError(errors)
    return documents, origins
