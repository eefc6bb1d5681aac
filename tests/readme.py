"""The README's JSON examples, read so that a test can hold each to the real output."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers import ROOT

README = ROOT / "README.md"


def readme_json(name: str) -> Any:
    """The fenced JSON between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``."""
    text = README.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    assert start in text and end in text, f"the README has no {name} block"
    block = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert block.startswith("```json\n") and block.endswith("```"), f"{name}: not fenced JSON"
    return json.loads(block.removeprefix("```json").removesuffix("```"))


def keys_of(value: Any) -> Any:
    """``value``'s shape: the keys at every depth (a list's by its first item), no values."""
    if isinstance(value, dict):
        return {key: keys_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [keys_of(value[0])] if value else []
    return None
