"""The package's modules parsed once per test process: a dozen unit tests (layers, sizes, private access,
atomic writes, glossary words, ...) each walk the syntax tree of every module, and parsing the whole
package takes longer than any one of their walks. The trees are shared: a test reads them, never
changes them."""

from __future__ import annotations

import ast
import functools


@functools.cache
def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, kept for the next test that parses the same text."""
    return ast.parse(source)
