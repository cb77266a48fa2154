"""Turn a document into heading-aware chunks that remember where they came from.

llama-index's Markdown parser splits on headings; long sections are split again by
its sentence splitter. Every chunk keeps its source path, heading path and line range,
because every answer must cite the section it came from. reStructuredText headings are
rewritten to Markdown ones first (line numbers preserved); plain text is read as
Markdown (troubleshooting pages often are).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from rlmedic.confine import looks_binary, walk_tree
from rlmedic.errors import UserError

DOC_SUFFIXES = (".md", ".markdown", ".mdx", ".rst", ".txt", ".text")
#: Files larger than this are skipped with a clear message (docs are rarely > 1 MB).
MAX_DOC_BYTES = 5 * 1024 * 1024
#: Sections longer than this are split again (characters).
MAX_CHUNK_CHARS = 1600
#: Sections shorter than this (characters, heading included) join their first subsection.
MIN_SECTION_CHARS = 240


@dataclass(frozen=True)
class Chunk:
    id: str
    text: str
    source: str  # display path, e.g. "seeds/002_x.txt" or "card:oom-sglang-generation"
    path: str  # absolute path on disk, or "" for built-in cards
    section: str  # heading path, " > " separated
    line_start: int
    line_end: int
    kind: str = "doc"  # "doc" or "card"

    @property
    def heading(self) -> str:
        """The deepest heading, normalised (for matching card references to sections)."""
        return normalize_heading(self.section.split(" > ")[-1])

    def metadata(self) -> dict[str, str | int]:
        return {
            "source": self.source,
            "path": self.path,
            "section": self.section,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "kind": self.kind,
            "heading": self.heading,
        }


def normalize_heading(text: str) -> str:
    """'Issue: SGLang Engine Crash' and 'Issue - SGLang engine crash' -> 'issue sglang engine crash'."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_document(data: bytes, name: str) -> tuple[str, str | None]:
    """Bytes to text. Returns (text, warning). Binary input raises :class:`UserError`."""
    if looks_binary(data):
        raise UserError(f"{name}: looks like a binary file, not a text document")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        text = data.decode("latin-1")
        return text, f"{name}: not valid UTF-8 (byte {exc.start}); read as Latin-1"


_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>_:.])\1{2,}\s*$")


def rst_to_markdown_headings(text: str) -> str:
    """Rewrite RST section titles (text + underline) as ``#`` headings, same line count."""
    lines = text.split("\n")
    levels: list[str] = []
    for i in range(1, len(lines)):
        m = _RST_UNDERLINE.match(lines[i])
        title = lines[i - 1].strip()
        if m and title and not _RST_UNDERLINE.match(lines[i - 1]) and len(lines[i].rstrip()) >= len(title):
            char = m.group(1)
            if char not in levels:
                levels.append(char)
            lines[i - 1] = "#" * min(levels.index(char) + 1, 6) + " " + title
            lines[i] = ""
    return "\n".join(lines)


_FAQ_ITEM = re.compile(r"^\s{0,3}(?:\d+[.)]|[-*])\s+\*\*((?:(?!\*\*).){8,200})\*\*\s*$")


def faq_items_to_headings(text: str) -> str:
    """FAQ pages list questions as bold numbered items, not headings. Make each a
    heading (one line for one line) so every answer becomes its own citable section."""
    lines = text.split("\n")
    depth = max((len(m.group(1)) for m in re.finditer(r"^(#{1,5}) ", text, re.M)), default=1)
    in_code = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        m = None if in_code else _FAQ_ITEM.match(line)
        if m:
            lines[i] = "#" * min(depth + 1, 6) + " " + m.group(1).strip()
    return "\n".join(lines)


def _line_of(offsets: list[int], char_index: int) -> int:
    """1-based line number of a character offset (binary search over line starts)."""
    return bisect.bisect_right(offsets, char_index)


def chunk_document(text: str, source: str, path: str = "", kind: str = "doc") -> list[Chunk]:
    """Split ``text`` into heading-aware chunks with heading path and line range."""
    from rlmedic.memory import collector_paused

    with collector_paused():
        from llama_index.core import Document
        from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter

    if path.endswith(".rst") or source.endswith(".rst"):
        text = rst_to_markdown_headings(text)
    text = faq_items_to_headings(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    doc = Document(text=text)
    sections = MarkdownNodeParser().get_nodes_from_documents([doc])
    splitter = SentenceSplitter(chunk_size=360, chunk_overlap=40)
    chunks: list[Chunk] = []
    parsed: list[tuple[str, int, str]] = []
    for node in sections:
        body = node.get_content()
        if not body.strip() or (body.strip().startswith("#") and "\n" not in body.strip()):
            continue  # empty, or a heading with nothing under it before the next heading
        start = node.start_char_idx if node.start_char_idx is not None else text.find(body)
        heading_path = [h for h in str(node.metadata.get("header_path", "")).strip("/").split("/") if h]
        first = body.lstrip().split("\n", 1)[0]
        if first.startswith("#"):
            heading_path.append(first.lstrip("#").strip())
        parsed.append((body, start, " > ".join(heading_path)))
    # A tiny intro under a heading ("Try these in order:") means little on its own:
    # it joins its first subsection, which then cites from the intro's first line.
    merged: list[tuple[str, int, str]] = []
    own_size = 0  # size of the last section merged in, without the intros before it
    for body, start, section in parsed:
        if merged:
            _, prev_start, prev_section = merged[-1]
            if own_size < MIN_SECTION_CHARS and section.startswith(prev_section + " > "):
                merged[-1] = (text[prev_start:start] + body, prev_start, section)
                own_size = len(body)
                continue
        merged.append((body, start, section))
        own_size = len(body)
    seen_ids: set[str] = set()
    for body, start, section in merged:
        pieces = [(body, start)]
        if len(body) > MAX_CHUNK_CHARS:
            pieces = []
            cursor = 0
            for piece in splitter.split_text(body):
                at = body.find(piece[:80], max(0, cursor - 400))
                at = cursor if at < 0 else at
                pieces.append((piece, start + at))
                cursor = at + len(piece)
        for piece, piece_start in pieces:
            if not piece.strip():
                continue
            line_start = _line_of(line_starts, max(piece_start, 0))
            line_end = _line_of(line_starts, max(piece_start, 0) + max(len(piece) - 1, 0))
            # the heading path travels with every chunk: its words are often the best
            # evidence of what a section is about (for BM25 and the embedding alike)
            body_text = f"{section}\n\n{piece}" if section else piece
            # unique within the document even when pieces repeat (one 20,000-character line of the
            # same text splits into identical pieces on the same line): the store refuses duplicate ids
            chunk_id = content_hash(f"{source}\0{line_start}\0{piece_start}\0{piece}".encode())[:24]
            n = 1
            while chunk_id in seen_ids:
                n += 1
                chunk_id = content_hash(f"{source}\0{line_start}\0{piece_start}\0{piece}\0{n}".encode())[:24]
            seen_ids.add(chunk_id)
            chunks.append(Chunk(chunk_id, body_text, source, path, section, line_start, line_end, kind))
    return chunks


def discover(paths: list[Path]) -> list[tuple[Path, Path]]:
    """Files to index: (file, root it was found under). Explicit files are kept as given."""
    found: list[tuple[Path, Path]] = []
    for root in paths:
        if root.is_file():
            found.append((root, root.parent))
        elif root.is_dir():
            files = []
            for folder, dirs, names in walk_tree(root):  # not rglob: it recursed, a deep folder crashed
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                files += [Path(folder, n) for n in names if not n.startswith(".")]
            for file in sorted(files):
                if file.suffix.lower() in DOC_SUFFIXES and file.is_file():
                    found.append((file, root))
    return found
