"""Logs: scan training logs for failure signatures and metric trouble, find the root cause, excerpt it.

``scan`` (the multi-pattern scanner), ``signatures`` (+ ``signatures.yaml``, the catalog),
``metrics`` (reward / loss / grad-norm streams), ``diagnose`` (root cause and cascades),
``excerpt`` (the lines worth pasting).
"""
