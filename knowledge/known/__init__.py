"""Known upstream issues as data: records, their validator, and matching against a user's failure.

Records are YAML files beside this module (see ``README.md``), plus team folders
(``RLMEDIC_KNOWN_ISSUES``, ``--known-issues DIR``). ``python -m rlmedic.knowledge.known --check``
validates them. The public API:

- :func:`load` -> :class:`Pack` (records + one line per problem)
- :func:`match` -> [:class:`KnownMatch`] and :func:`vote_category`
- :func:`known_lines` (answer text), :func:`alert_text` (watch, MCP)
"""

from rlmedic.knowledge.known.answer import alert_text, known_lines, leading
from rlmedic.knowledge.known.load import Pack, add_folders, folders, load
from rlmedic.knowledge.known.match import KnownMatch, detect_frameworks, match, record_from_thread, vote_category
from rlmedic.knowledge.known.schema import Record, fixed_text

__all__ = [
    "Pack", "Record", "KnownMatch", "load", "folders", "add_folders", "match", "vote_category", "detect_frameworks",
    "record_from_thread", "known_lines", "alert_text", "leading", "fixed_text",
]
