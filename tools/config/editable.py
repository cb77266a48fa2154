"""What the AReaL loader and the slime parser share: the original text, the edited text, the diff."""

from __future__ import annotations

from pathlib import Path


class EditableText:
    """What the AReaL loader and the slime parser share: a file's original text, its edited text, the diff.

    Subclasses are dataclasses with ``path``, ``original`` and ``text`` fields; edits change
    ``text`` only, so the input file is never touched.
    """

    path: str
    original: str
    text: str

    @property
    def changed(self) -> bool:
        return self.text != self.original

    def dump(self) -> str:
        return self.text

    def diff(self, from_name: str = "", to_name: str = "") -> str:
        """Unified diff from the original text to the current text."""
        import difflib

        name = Path(self.path).name
        return "".join(difflib.unified_diff(self.original.splitlines(keepends=True), self.text.splitlines(keepends=True),
                                            fromfile=from_name or f"a/{name}", tofile=to_name or f"b/{name}"))
