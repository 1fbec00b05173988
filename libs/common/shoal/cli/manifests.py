"""Reading manifest files for `shoal simulate`: YAML (multi-document) or JSON, files or directories.

Every document keeps its origin (`file:document-number`, numbers count from 1) so problems can be
reported as `file:N: field: problem`. `kind: List` documents (kubectl output) are unpacked; their
items keep the list's origin and report fields as `items[i].field`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass

import yaml

SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(Exception):
    """Input that cannot be read at all (missing file, invalid YAML/JSON)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Origin:
    path: str
    document: int  # 1-based
    item: int | None = None  # index inside a `kind: List`

    def where(self, field: str) -> str:
        prefix = f"items[{self.item}]" if self.item is not None else ""
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


def _documents(path: str, text: str) -> list[object]:
    if path.endswith(".json"):
        data = json.loads(text)
        return list(data) if isinstance(data, list) else [data]
    return list(yaml.safe_load_all(text))


def load_documents(paths: Iterable[str]) -> tuple[list[dict], list[Origin]]:
    """All non-empty documents from `paths`, with their origins. Raises ManifestError."""
    documents: list[dict] = []
    origins: list[Origin] = []
    errors: list[str] = []
    for path in expand_paths(paths):
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            docs = _documents(path, text)
        except OSError as exc:
            errors.append(f"{path}:0: file: {exc.strerror or exc}")
            continue
        except json.JSONDecodeError as exc:
            errors.append(f"{path}:1: document: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            doc_no = text[: mark.index].count("\n---") + 1 if mark is not None else 1
            detail = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            line = f" at line {mark.line + 1}" if mark is not None else ""
            errors.append(f"{path}:{doc_no}: document: invalid YAML{line}: {detail}")
            continue
        for number, doc in enumerate(docs, start=1):
            if doc is None:
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
