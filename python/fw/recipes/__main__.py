"""``python -m fw.recipes --list [--file FW_RECIPES]``: print the recipe registry as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from fw.recipes import RecipeError, load_registry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fw.recipes")
    ap.add_argument("--list", action="store_true", help="print the registry as JSON")
    ap.add_argument("--file", default=None, help="user recipes file (default: $FW_RECIPES)")
    args = ap.parse_args(argv)
    if not args.list:
        ap.print_help()
        return 2
    try:
        reg = load_registry(args.file)
    except RecipeError as e:
        print(f"fw.recipes: {e}", file=sys.stderr)
        return 1
    json.dump({"recipes": list(reg.values())}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
