"""Configs: parse AReaL YAML and slime launch scripts, check them against rules, propose the fixed file.

``areal`` (round-trip YAML + ``areal_schema.json``), ``slime`` (launch-script arguments),
``editable`` (original/edited text and the diff), ``rules`` (the table in
``config_rules.yaml``, result types, lint context), ``checks`` (one function per rule),
``fix`` (lint and fix entry points).
"""
