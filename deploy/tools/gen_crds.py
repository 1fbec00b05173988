"""Render the CRDs in deploy/k8s/base/crds from their sources in deploy/tools/crd-src.

The sources use YAML anchors to share repeated schema pieces (resource lists, topology constraints); kustomize
does not expand anchors or merge keys reliably, so the committed CRDs are plain YAML rendered from them.

    uv run python deploy/tools/gen_crds.py           # rewrite deploy/k8s/base/crds/*.yaml
    uv run python deploy/tools/gen_crds.py --check   # exit 1 when a committed CRD differs from its source
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

TOOLS = Path(__file__).resolve().parent
SOURCES = TOOLS / "crd-src"
TARGET = TOOLS.parent / "k8s" / "base" / "crds"


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
    # long prose (descriptions) folds; CEL rules and patterns stay on one line
    if len(s) > 100 and " " in s and "self" not in s:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=">")
    return dumper.represent_scalar("tag:yaml.org,2002:str", s)


_Dumper.add_representer(str, _str)


def render(source: Path) -> str:
    text = source.read_text()
    header = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        header.append(line)
    body = yaml.dump(yaml.safe_load(text), Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return "".join(header) + "# Generated from deploy/tools/crd-src by deploy/tools/gen_crds.py: edit the source.\n" + body


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source in sorted(SOURCES.glob("*.yaml")):
        target = TARGET / source.name
        rendered = render(source)
        if check:
            if not target.is_file() or target.read_text() != rendered:
                stale.append(str(target))
        else:
            TARGET.mkdir(parents=True, exist_ok=True)
            target.write_text(rendered)
    if stale:
        print("out of date (run deploy/tools/gen_crds.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
