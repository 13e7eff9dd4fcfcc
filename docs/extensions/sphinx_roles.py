"""Griffe extension of the docs build: the Sphinx roles of our docstrings become code spans.

The docstrings cross-reference in Sphinx style (``:class:`~keras_structured.SparseMAP```),
which Markdown would print as it is. This turns ``:role:`path``` into `` `path` `` and
``:role:`~a.b.Name``` into `` `Name` ``, as Sphinx displays them.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")


def _code_span(match: re.Match) -> str:
    short, path = match.groups()
    return f"`{path.rsplit('.', 1)[-1] if short else path}`"


class SphinxRoles(griffe.Extension):
    """Rewrites the docstring of every object as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code_span, obj.docstring.value)
