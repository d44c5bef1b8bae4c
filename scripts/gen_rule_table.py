"""Write the README's rule table from the registry (between the rules:start/end markers).

    python scripts/gen_rule_table.py          # rewrite README.md
    python scripts/gen_rule_table.py --check  # exit 1 when README.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def table() -> str:
    sys.path.insert(0, str(ROOT))
    from graphmend.transforms.registry import all_rules

    rows = ["| Code | Name | Fix safety | What it fixes |", "|---|---|---|---|"]
    for r in all_rules():
        summary = r.summary.replace("|", "\\|")
        rows.append(f"| `{r.code}` | {r.name} | {r.safety.value} | {summary} |")
    rows.append("")
    rows.append("`graphmend explain GMxxx` shows a rule's documentation; `graphmend rules` lists them.")
    return "\n".join(rows)


def render(readme: str) -> str:
    start, end = readme.index(START), readme.index(END)
    return readme[: start + len(START)] + "\n" + table() + "\n" + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that README.md is current")
    args = parser.parse_args(argv)
    path = ROOT / "README.md"
    current = path.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print("README.md: the rule table is out of date; run python scripts/gen_rule_table.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
